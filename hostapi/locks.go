package hostapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Locks are the per-VM locks. A lock belongs to the machine (bench identity
// + vmid), not to a caller: two callers reaching one VM queue behind one
// lock. A script run holds its VM's lock for the whole run, so a console
// call from elsewhere cannot slip between its steps.
//
// With a directory, a lock is also an flock(2) on a file there, so the
// processes sharing that directory (a server and a `poligon run` with one
// config) serialize too; within a process a channel does the queueing.
type Locks struct {
	dir   string
	mu    sync.Mutex
	slots map[string]chan struct{}
}

// NewLocks makes an empty lock table; dir ("" for none) holds the lock
// files shared with other processes.
func NewLocks(dir string) *Locks { return &Locks{dir: dir, slots: map[string]chan struct{}{}} }

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
// the release function, or an error saying the VM is busy (errors.Is
// ErrBusy). A free lock is taken at once, whatever the wait: Acquire with
// wait 0 is a try.
func (l *Locks) Acquire(ctx context.Context, bench string, vmid int, wait time.Duration) (func(), error) {
	deadline := time.Now().Add(wait)
	ch := l.slot(lockKey(bench, vmid))
	select {
	case ch <- struct{}{}:
	default:
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case ch <- struct{}{}:
		case <-timer.C:
			return nil, errBusy(vmid)
		case <-ctx.Done():
			return nil, errCancelledWaiting(ctx, vmid)
		}
	}
	file, err := l.lockFile(ctx, bench, vmid, deadline)
	if err != nil {
		<-ch
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if file != nil {
				file.Close() // drops the flock
			}
			<-ch
		})
	}, nil
}

// ErrBusy marks a lock another call (or another poligon process) holds.
var ErrBusy = errors.New("vm is busy")

// lockFile takes the flock of vmid's file, polling until deadline: flock
// has no timeout of its own.
func (l *Locks) lockFile(ctx context.Context, bench string, vmid int, deadline time.Time) (*os.File, error) {
	if l.dir == "" {
		return nil, nil
	}
	sum := sha256.Sum256([]byte(bench))
	path := filepath.Join(l.dir, fmt.Sprintf("%s-%d.lock", hex.EncodeToString(sum[:8]), vmid))
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, os.ErrNotExist) { // the first lock: make the directory
		if err = os.MkdirAll(l.dir, 0o700); err == nil {
			file, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		}
	}
	if err != nil {
		return nil, &Error{Message: fmt.Sprintf("cannot lock vmid %d: %v", vmid, err), Hint: "the lock directory is under state_dir: make it writable", Err: err}
	}
	for {
		err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return file, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			file.Close()
			return nil, &Error{Message: fmt.Sprintf("cannot lock vmid %d: %v", vmid, err), Err: err}
		}
		if time.Now().After(deadline) {
			file.Close()
			e := Failf("another poligon process on this machine is using the VM (a `poligon run`, or a second server): wait for it, then call again",
				"vmid %d is busy", vmid)
			e.Err = ErrBusy
			return nil, e
		}
		select {
		case <-ctx.Done():
			file.Close()
			return nil, errCancelledWaiting(ctx, vmid)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func errBusy(vmid int) error {
	e := Failf("wait for the other call on this VM to finish (a script run holds the VM for all its steps), then call again",
		"vmid %d is busy", vmid)
	e.Err = ErrBusy
	return e
}

func errCancelledWaiting(ctx context.Context, vmid int) error {
	return &Error{Message: fmt.Sprintf("cancelled while waiting for vmid %d", vmid), Hint: "the call was cancelled; nothing was done", Err: ctx.Err()}
}
