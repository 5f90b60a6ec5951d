package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/poligon/poligon/runtime"
)

// Replayer is a runtime.Host that answers a run's calls from a transcript,
// in order, without a machine. The first call whose name or arguments
// differ from the transcript's is a *Divergence, and so is every call after.
type Replayer struct {
	opts    options
	mu      sync.Mutex
	entries []Entry // the script's own calls (depth 0), in order
	next    int
	err     *Divergence
}

var _ runtime.Host = (*Replayer)(nil)

// NewReplayer answers from entries (as Read gives them). Calls recipes made
// inside their recipe call (Depth > 0) are skipped: the recipe call is
// answered whole.
func NewReplayer(entries []Entry, opts ...Option) *Replayer {
	own := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if e.Depth == 0 {
			own = append(own, e)
		}
	}
	return &Replayer{opts: buildOptions(opts), entries: own}
}

// Divergence is where a replayed run stopped matching its transcript.
type Divergence struct {
	N              int // 1-based number of the call
	Call, Args     string
	WantCall, Want string // empty WantCall: the transcript had ended
}

func (d *Divergence) Error() string {
	if d.WantCall == "" {
		return fmt.Sprintf("transcript diverged at call %d: the script called %s %s, but the transcript ended after %d calls",
			d.N, d.Call, d.Args, d.N-1)
	}
	return fmt.Sprintf("transcript diverged at call %d: the script called %s %s, the transcript has %s %s",
		d.N, d.Call, d.Args, d.WantCall, d.Want)
}

// Call answers the next call from the transcript if it is the same call.
func (r *Replayer) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	got := canonical(r.opts.apply(name, args))
	if r.next >= len(r.entries) {
		r.err = &Divergence{N: r.next + 1, Call: name, Args: shorten(got)}
		return nil, r.err
	}
	e := r.entries[r.next]
	if want := canonical(e.Args); name != e.Call || !bytes.Equal(got, want) {
		r.err = &Divergence{N: r.next + 1, Call: name, Args: shorten(got), WantCall: e.Call, Want: shorten(want)}
		return nil, r.err
	}
	r.next++
	if e.Error != nil {
		return nil, &runtime.HostError{Call: name, Message: e.Error.Message, Hint: e.Error.Hint}
	}
	return e.Answer, nil
}

// Done reports a divergence, or the calls the transcript has that the run
// did not make.
func (r *Replayer) Done() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if left := len(r.entries) - r.next; left > 0 {
		e := r.entries[r.next]
		return fmt.Errorf("transcript not finished: the run made %d of its %d calls; the next was call %d %s %s",
			r.next, len(r.entries), r.next+1, e.Call, shorten(canonical(e.Args)))
	}
	return nil
}

// canonical re-encodes JSON with sorted keys, no insignificant space and
// numbers as written, so equal arguments compare equal bytewise.
func canonical(b json.RawMessage) []byte {
	if len(bytes.TrimSpace(b)) == 0 {
		return []byte("null")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return b
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b
	}
	return bytes.TrimRight(out.Bytes(), "\n")
}

// shorten keeps a divergence message readable when the arguments are long.
func shorten(b []byte) string {
	const max = 300
	if len(b) <= max {
		return string(b)
	}
	return string(b[:max]) + fmt.Sprintf("... (%d bytes)", len(b))
}
