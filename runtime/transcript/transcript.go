// Package transcript records a run's host calls as JSON lines and replays
// them: a Recorder is a runtime.Host that writes every call of the host it
// wraps, a Replayer is a runtime.Host that answers from a transcript, so a
// script can run again without a machine and show where it went another way.
//
// A transcript is one Header line, then one Entry line per call, in the
// order the calls ended. Seq is the order they began: the calls a recipe
// makes, when its run is recorded through the same Recorder, end before
// their recipe call does, and carry the Depth they were made at.
package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// Header is the first line: what ran, with what, at what seed and clock.
type Header struct {
	Script string
	SHA256 string
	VMID   int
	Params map[string]string
	Seed   int64
	Clock  time.Time
}

// Entry is one host call: its arguments and its answer or error.
type Entry struct {
	Seq    int
	Call   string
	Args   json.RawMessage
	Answer json.RawMessage `json:",omitempty"`
	Error  *ErrorInfo      `json:",omitempty"`
	Ms     float64
	// Depth is 0 for the script's own calls, n for a call made while n
	// other calls were in progress: a recipe's calls, nested in its
	// "recipe" call. A replay answers the recipe call from the transcript,
	// so it skips them.
	Depth int `json:",omitempty"`
}

// ErrorInfo is a failed call as the script saw it.
type ErrorInfo struct {
	Message string
	Hint    string `json:",omitempty"`
}

// Read parses a transcript: its header and its entries in call order (Seq).
func Read(r io.Reader) (Header, []Entry, error) {
	var h Header
	br := bufio.NewReader(r)
	line, n := 0, 0
	var entries []Entry
	for {
		text, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(text)) > 0 {
			line++
			if line == 1 {
				if uerr := json.Unmarshal(text, &h); uerr != nil {
					return h, nil, fmt.Errorf("transcript line 1 (the header): %v", uerr)
				}
			} else {
				var e Entry
				if uerr := json.Unmarshal(text, &e); uerr != nil {
					return h, nil, fmt.Errorf("transcript line %d: %v", line, uerr)
				}
				if e.Call == "" {
					return h, nil, fmt.Errorf("transcript line %d: an entry without a call name", line)
				}
				entries = append(entries, e)
				n++
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return h, nil, fmt.Errorf("reading transcript: %w", err)
		}
	}
	if line == 0 {
		return h, nil, errors.New("transcript is empty: no header line")
	}
	slices.SortStableFunc(entries, func(a, b Entry) int { return a.Seq - b.Seq })
	return h, entries, nil
}

// Option configures a Recorder or a Replayer.
type Option func(*options)

type options struct {
	redact func(call string, args json.RawMessage) json.RawMessage
}

// WithRedact rewrites a call's arguments before they are written (a
// Recorder) or compared (a Replayer): a typed password, a token. Give both
// the same function, so a redacted transcript still replays.
func WithRedact(f func(call string, args json.RawMessage) json.RawMessage) Option {
	return func(o *options) { o.redact = f }
}

func buildOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func (o options) apply(call string, args json.RawMessage) json.RawMessage {
	if o.redact == nil {
		return args
	}
	return o.redact(call, args)
}
