package hostapi

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Locks are the per-VM locks of the whole process. A lock belongs to the
// machine (bench identity + vmid), not to a caller: two callers reaching one
// VM queue behind one lock. A script run holds its VM's lock for the whole
// run, so a console call from elsewhere cannot slip between its steps.
type Locks struct {
	mu    sync.Mutex
	slots map[string]chan struct{}
}

// NewLocks makes an empty lock table.
func NewLocks() *Locks { return &Locks{slots: map[string]chan struct{}{}} }

func lockKey(bench string, vmid int) string { return fmt.Sprintf("%s/%d", bench, vmid) }

func (l *Locks) slot(key string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.slots[key]
	if !ok {
		ch = make(chan struct{}, 1)
		l.slots[key] = ch
	}
	return ch
}

// Acquire takes the lock of vmid on bench, waiting at most wait; it answers
// the release function, or an error saying the VM is busy.
func (l *Locks) Acquire(ctx context.Context, bench string, vmid int, wait time.Duration) (func(), error) {
	ch := l.slot(lockKey(bench, vmid))
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case ch <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-ch }) }, nil
	case <-timer.C:
		return nil, Failf("wait for the other call on this VM to finish (a script run holds the VM for all its steps), then call again",
			"vmid %d is busy", vmid)
	case <-ctx.Done():
		return nil, &Error{Message: fmt.Sprintf("cancelled while waiting for vmid %d", vmid), Hint: "the call was cancelled; nothing was done", Err: ctx.Err()}
	}
}

// Busy reports whether vmid's lock is taken (for tests and /metrics).
func (l *Locks) Busy(bench string, vmid int) bool {
	return len(l.slot(lockKey(bench, vmid))) > 0
}
