package hostapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Watching: a VM's screen seen without its lock, by those who only look —
// the trace's frame after a call, a browser following the console. A
// watcher never sends input and never waits behind a call that holds the
// VM (a script holds it for its whole run).

// Watched is a VM whose screen may be looked at.
type Watched struct {
	c    *Caller
	info backends.VM
}

// Watch answers vmid to look at, once the caller is found to own it (the
// check is made here, once: a watcher keeps its answer).
func (c *Caller) Watch(ctx context.Context, vmid int) (*Watched, error) {
	vm, err := c.readOwned(ctx, vmid)
	if err != nil {
		return nil, err
	}
	return &Watched{c: c, info: vm}, nil
}

// Recheck answers why the caller may no longer look at the VM — it is gone,
// or no longer theirs (a physical bench's lease ended or passed on, a vmid
// now another's VM) — and nil while they may, or when the backend could not
// tell (a watch is not cut for a question left unanswered).
func (w *Watched) Recheck(ctx context.Context) error {
	_, err := w.c.readOwned(ctx, w.info.VMID)
	var e *Error
	if errors.Is(err, backends.ErrNotFound) || errors.As(err, &e) && e.Err == nil {
		return err
	}
	return nil
}

// Watcher answers the VM to look at after the call that holds it has let
// go (the trace's frame after a call).
func (v *VM) Watcher() *Watched { return &Watched{c: v.c, info: v.info} }

// VM answers the watched VM as it was when the watch began.
func (w *Watched) VM() backends.VM { return w.info }

// Owner answers whose VM it is (the caller's owner).
func (w *Watched) Owner() string { return w.c.owner }

// Frame answers the console's frame as the console has it now, without a
// round trip to the machine (a VNC console: the last update its server
// sent).
func (w *Watched) Frame(ctx context.Context) (Frame, error) {
	// Not noted as the VM's last frame: a watcher's looks (a browser's
	// feed, many a second) are no call's, and a trace step's frame after
	// must be its own call's or its glance's.
	v := &VM{c: w.c, info: w.info}
	s, err := v.screen(ctx)
	if err != nil {
		return Frame{}, err
	}
	return v.current(ctx, s, time.Now())
}

// Changes answers the console's last change time (cheap: no copy of the
// frame), for a watcher that polls; ok is false for a console that cannot
// tell.
func (w *Watched) Changes(ctx context.Context) (at int64, ok bool) {
	s, err := (&VM{c: w.c, info: w.info}).screen(ctx)
	if err != nil {
		return 0, false
	}
	if cs, isC := s.(backends.ChangeClock); isC {
		return cs.Changed().UnixNano(), true
	}
	return 0, false
}

// LastFrame answers the last frame any call of this process took of
// vmid on the caller's bench (watchers' looks aside): what a call last saw.
func (c *Caller) LastFrame(vmid int) (Frame, bool) {
	return c.env.last.get(fmt.Sprintf("%s/%d", c.lockNS, vmid))
}

// lastFrames keeps each VM's last frame (pointers to frames already made:
// no copy).
type lastFrames struct {
	mu sync.Mutex
	m  map[string]Frame
}

func (l *lastFrames) set(key string, f Frame) {
	if f.Image == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]Frame{}
	}
	if old, ok := l.m[key]; !ok || !old.At.After(f.At) {
		l.m[key] = f
	}
}

func (l *lastFrames) get(key string) (Frame, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.m[key]
	return f, ok
}

// Observation is what one call of a door did on machines, as hostapi saw
// it: the VMs it held. A door observes a call to trace it (the frames
// before and after the call).
type Observation struct {
	mu  sync.Mutex
	vms []*Watched
}

type observationKey struct{}

// Observe makes the calls made with the answered context note the VMs they
// lock into o.
func Observe(ctx context.Context) (context.Context, *Observation) {
	o := &Observation{}
	return context.WithValue(ctx, observationKey{}, o), o
}

// VMs answers the VMs the call held, each once, in the order it took them.
func (o *Observation) VMs() []*Watched {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*Watched(nil), o.vms...)
}

func (o *Observation) held(c *Caller, vm backends.VM) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.vms {
		if w.info.VMID == vm.VMID && w.c.lockNS == c.lockNS {
			return
		}
	}
	o.vms = append(o.vms, &Watched{c: c, info: vm})
}

func observed(ctx context.Context) *Observation {
	o, _ := ctx.Value(observationKey{}).(*Observation)
	return o
}
