package trace

import (
	"time"

	"github.com/poligon/poligon/hostapi/calls"
	"github.com/poligon/poligon/runtime/transcript"
)

// A script run's transcript and its trace are one run seen twice: the
// transcript has every host call with its answer (what a replay needs),
// the trace has the same calls with the screens around them. A transcript
// read as steps is written out like any trace (no frames: it kept none).

// FromTranscript answers a transcript's calls as steps, in the order they
// began, timed from the run's clock.
func FromTranscript(h transcript.Header, entries []transcript.Entry) []Step {
	steps := make([]Step, 0, len(entries))
	at := h.Clock
	for _, e := range entries {
		took := time.Duration(e.Ms * float64(time.Millisecond))
		s := Step{At: at, Took: took, VMID: h.VMID, Source: SourceScript, Call: e.Call, Args: e.Args, Outcome: "ok"}
		if e.Depth > 0 {
			s.Call = e.Call + " (in a recipe)"
		}
		if e.Error != nil {
			s.Outcome, s.Error = "error", e.Error.Message
			if e.Error.Hint != "" {
				s.Error += "\nhint: " + e.Error.Hint
			}
		}
		if calls.ReadsText(e.Call) {
			s.Text = string(e.Answer)
		}
		steps = append(steps, s)
		at = at.Add(took)
	}
	return steps
}
