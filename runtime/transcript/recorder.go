package transcript

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/poligon/poligon/runtime"
)

// Recorder is a runtime.Host that passes every call to the host it wraps
// and appends it to a transcript.
type Recorder struct {
	next runtime.Host
	opts options

	mu       sync.Mutex
	w        io.Writer
	seq      int
	inFlight int
	err      error // the first write error
}

var _ runtime.Host = (*Recorder)(nil)

// NewRecorder writes the header to w and answers a Host that records every
// call of next after it. A write error does not fail the calls: Err says.
func NewRecorder(w io.Writer, h Header, next runtime.Host, opts ...Option) *Recorder {
	r := &Recorder{next: next, opts: buildOptions(opts), w: w}
	r.writeLine(h)
	return r
}

// Call calls the wrapped host and records the call.
func (r *Recorder) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	r.mu.Lock()
	r.seq++
	e := Entry{Seq: r.seq, Call: name, Depth: r.inFlight}
	r.inFlight++
	r.mu.Unlock()

	start := time.Now()
	answer, err := r.next.Call(ctx, name, args)
	e.Ms = float64(time.Since(start).Microseconds()) / 1000
	e.Args = asJSON(r.opts.apply(name, args))
	if err != nil {
		e.Error = errorInfo(err)
	} else {
		e.Answer = asJSON(answer)
	}

	r.mu.Lock()
	r.inFlight--
	r.mu.Unlock()
	r.writeLine(e)
	return answer, err
}

// Err is the first error writing the transcript, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Recorder) writeLine(v any) {
	line, err := json.Marshal(v)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		_, err = r.w.Write(append(line, '\n'))
	}
	if err != nil && r.err == nil {
		r.err = err
	}
}

func errorInfo(err error) *ErrorInfo {
	var he *runtime.HostError
	if errors.As(err, &he) {
		return &ErrorInfo{Message: he.Message, Hint: he.Hint}
	}
	return &ErrorInfo{Message: err.Error()}
}

// asJSON keeps valid JSON as it is and wraps anything else in a string, so
// a host that answers garbage still leaves a readable line.
func asJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}
