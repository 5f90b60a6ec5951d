// Package trace keeps every call on a machine as a step — who made it (an
// MCP tool, a script's host call, a stand's build, poligon run, a browser),
// its arguments with secrets redacted, its outcome and time, and the frames
// before and after it where it touched the screen — and writes a trace out
// as one HTML file or a zip for a bug report.
//
// Recording is off the call's path: Record hands the step and the frames
// (pointers to pixels already taken) to a writer goroutine that encodes the
// PNGs and batches the rows into the state store. Storage is bounded by
// size and age, oldest dropped first, and survives a restart.
package trace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poligon/poligon/internal/store"
)

// Step is one call on a machine (internal/store's record of it).
type Step = store.TraceStep

// Query selects steps (internal/store's).
type Query = store.TraceQuery

// Sources of steps.
const (
	SourceMCP    = "mcp"    // an MCP tool call
	SourceScript = "script" // a script's host call (a script tool, a recipe)
	SourceStand  = "stand"  // a stand's build (its phases; its steps are script calls)
	SourceRun    = "run"    // poligon run at a terminal
	SourceWeb    = "web"    // input from a browser's live console
)

// Options bound a Recorder.
type Options struct {
	// Digest names a frame by its pixels: hostapi's (the frame: of the
	// answers), so a step's frames are the ones the agent was shown.
	Digest   func(*image.RGBA) string
	MaxBytes int64         // steps and frames together; 0: 1 GiB
	MaxAge   time.Duration // 0: 14 days
	Log      *slog.Logger
	// Queue is how many steps may wait for the writer; beyond it a step is
	// dropped (and counted) rather than slowing the call down. 0: 4096.
	Queue int
}

// Recorder records steps into a store, their frames as PNG files in dir.
type Recorder struct {
	st  *store.Store
	dir string
	o   Options

	q    chan pending
	done chan struct{}
	wg   sync.WaitGroup // RecordAfter's glances

	mu      sync.Mutex
	closing bool // no new glances
	closed  bool // no new steps

	recorded, dropped, pruned atomic.Int64
}

type pending struct {
	step          Step
	before, after *image.RGBA
}

// Open starts a recorder writing into st, its frames under dir.
func Open(st *store.Store, dir string, o Options) (*Recorder, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 30
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 14 * 24 * time.Hour
	}
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Digest == nil {
		return nil, errors.New("trace: no frame digest")
	}
	if err := os.MkdirAll(filepath.Join(dir, "frames"), 0o700); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	r := &Recorder{st: st, dir: dir, o: o, q: make(chan pending, o.Queue), done: make(chan struct{})}
	go r.write()
	return r, nil
}

// Record keeps step, with the frames before and after it (nil: none):
// pixels already taken, which nobody changes. It does not wait: the writer
// names, encodes and stores them.
func (r *Recorder) Record(step Step, before, after *image.RGBA) {
	if r == nil {
		return
	}
	p := pending{step: step, before: before, after: after}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.q <- p:
	default:
		r.dropped.Add(1)
	}
}

// RecordAfter keeps step once glance, called after delay and off the
// call's path, has taken the frame after it (the screen a moment after an
// input, not the instant it was sent).
func (r *Recorder) RecordAfter(step Step, before *image.RGBA, delay time.Duration, glance func() *image.RGBA) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		time.Sleep(delay)
		r.Record(step, before, glance())
	}()
}

// Close stores what is queued and stops the writer.
func (r *Recorder) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.wg.Wait() // the glances under way record their steps
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.q)
	}
	r.mu.Unlock()
	<-r.done
}

// Stats are the recorder's counters since it opened.
type Stats struct {
	Recorded, Dropped, Pruned int64
}

// Stats answers the counters.
func (r *Recorder) Stats() Stats {
	return Stats{Recorded: r.recorded.Load(), Dropped: r.dropped.Load(), Pruned: r.pruned.Load()}
}

// Usage answers what the trace holds.
func (r *Recorder) Usage(ctx context.Context) (store.TraceUsage, error) { return r.st.TraceUsage(ctx) }

// Steps answers the steps q selects. Who may read which steps is the
// caller's rule (the app's: a VM's owner, a bench's lease holder).
func (r *Recorder) Steps(ctx context.Context, q Query) ([]Step, error) {
	return r.st.TraceSteps(ctx, q)
}

var digestPattern = regexp.MustCompile(`^[0-9a-f]{1,16}$`)

// Frame answers a frame's PNG.
func (r *Recorder) Frame(digest string) ([]byte, error) {
	if !digestPattern.MatchString(digest) {
		return nil, fmt.Errorf("trace: %q is no frame digest", digest)
	}
	return os.ReadFile(r.framePath(digest))
}

func (r *Recorder) framePath(digest string) string {
	return filepath.Join(r.dir, "frames", digest[:min(2, len(digest))], digest+".png")
}

// batchEvery is how long the writer gathers steps into one transaction.
const batchEvery = 100 * time.Millisecond

// pruneEvery is how often the bound is applied.
const pruneEvery = time.Minute

func (r *Recorder) write() {
	defer close(r.done)
	var batch []pending
	tick := time.NewTicker(batchEvery)
	defer tick.Stop()
	lastPrune := time.Time{}
	flush := func() {
		if len(batch) > 0 {
			r.store(batch)
			batch = batch[:0]
		}
		if time.Since(lastPrune) >= pruneEvery {
			r.prune()
			lastPrune = time.Now()
		}
	}
	for {
		select {
		case p, ok := <-r.q:
			if !ok {
				flush()
				return
			}
			batch = append(batch, p)
			if len(batch) >= 256 {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// store encodes the batch's new frames and stores its steps.
func (r *Recorder) store(batch []pending) {
	var steps []Step
	var frames []store.TraceFrame
	saved := map[*image.RGBA]string{} // a frame two steps show is named and saved once
	frame := func(img *image.RGBA) string {
		if img == nil {
			return ""
		}
		if d, ok := saved[img]; ok {
			return d
		}
		d := r.o.Digest(img)
		n, err := r.saveFrame(d, img)
		if err != nil {
			r.o.Log.Warn("trace frame not saved", "frame", d, "err", err)
			d = ""
		} else {
			frames = append(frames, store.TraceFrame{Digest: d, Bytes: n})
		}
		saved[img] = d
		return d
	}
	for _, p := range batch {
		p.step.Before, p.step.After = frame(p.before), frame(p.after)
		steps = append(steps, p.step)
	}
	if _, err := r.st.AddTrace(context.Background(), steps, frames, time.Now()); err != nil {
		r.o.Log.Warn("trace steps not saved", "steps", len(steps), "err", err)
		r.dropped.Add(int64(len(steps)))
		return
	}
	r.recorded.Add(int64(len(steps)))
}

// saveFrame writes a frame's PNG unless it is there; it answers its size.
func (r *Recorder) saveFrame(digest string, img *image.RGBA) (int64, error) {
	if !digestPattern.MatchString(digest) {
		return 0, fmt.Errorf("%q is no frame digest", digest)
	}
	path := r.framePath(digest)
	if fi, err := os.Stat(path); err == nil {
		return fi.Size(), nil
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&buf, img); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return 0, err
	}
	return int64(buf.Len()), os.Rename(tmp, path)
}

// prune applies the bound and removes the frames no step names.
func (r *Recorder) prune() {
	n, gone, err := r.st.PruneTrace(context.Background(), time.Now().Add(-r.o.MaxAge), r.o.MaxBytes)
	if err != nil {
		r.o.Log.Warn("trace not pruned", "err", err)
		return
	}
	r.pruned.Add(n)
	for _, d := range gone {
		os.Remove(r.framePath(d))
	}
}

// Scope is what a call's steps carry beyond the call itself: the bench it
// runs on and who made it (as the audit log names them), the MCP session it
// came in, the stand whose build made it, and where it came from.
type Scope struct {
	Bench   string
	Caller  string
	Session string
	Stand   string
	Source  string
}

type scopeKey struct{}

// WithScope makes the calls made with ctx part of s (fields left empty
// keep the scope ctx had).
func WithScope(ctx context.Context, s Scope) context.Context {
	old := ScopeOf(ctx)
	if s.Bench == "" {
		s.Bench = old.Bench
	}
	if s.Caller == "" {
		s.Caller = old.Caller
	}
	if s.Session == "" {
		s.Session = old.Session
	}
	if s.Stand == "" {
		s.Stand = old.Stand
	}
	if s.Source == "" {
		s.Source = old.Source
	}
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeOf answers ctx's scope.
func ScopeOf(ctx context.Context) Scope {
	s, _ := ctx.Value(scopeKey{}).(Scope)
	return s
}

// Step answers a step of the scope: its bench, caller, session, stand and
// source filled in.
func (s Scope) Step() Step {
	return Step{Bench: s.Bench, Caller: s.Caller, Session: s.Session, Stand: s.Stand, Source: s.Source}
}

// GlanceAfter is how long after an input the trace looks at the screen for
// the step's frame after: long enough for the guest to draw what the input
// did, short enough to come before the next call as a rule.
const GlanceAfter = 300 * time.Millisecond
