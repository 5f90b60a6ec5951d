package qemu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
)

// QEMU's monitor (QMP) serves one client at a time: a second connects but
// gets no greeting until the first hangs up. Another poligon process lets go
// as soon as its command is done; a user's own QMP tool may hold it for as
// long as it runs. So nothing that can do without the monitor waits for it:
// a status read gives up after statusWait and answers the state last seen,
// saying so, and does not ask again until the monitor is let go; a command
// that needs the monitor (a snapshot, an eject) waits up to monitorBusyWait,
// then fails naming the cause.
const (
	statusWait      = 250 * time.Millisecond
	monitorBusyWait = 5 * time.Second
)

// errMonitorHeld is a monitor that did not greet in time: another client
// holds it (or, rarely, QEMU is too busy to greet).
var errMonitorHeld = errors.New("QEMU's QMP socket did not answer: another client holds it")

// MonitorSocket is the path of the VM's QMP socket, for a user's own QMP
// tool (QEMU serves one client on it at a time).
func (d *Driver) MonitorSocket(vmid int) string { return d.l.qmpSocket(vmid) }

// dialMonitor connects to a running VM's QMP socket.
func (d *Driver) dialMonitor(ctx context.Context, vmid int) (*qmp.Client, error) {
	if !d.alive(vmid) {
		return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotRunning)
	}
	dctx, cancel := context.WithTimeout(ctx, monitorBusyWait)
	defer cancel()
	sock := d.l.qmpSocket(vmid)
	c, err := qmp.Dial(dctx, sock)
	if err == nil {
		return c, nil
	}
	// No greeting before the wait ran out (the caller's or this one), or
	// (EAGAIN) QEMU's accept queue is full of clients queued behind the one
	// it serves.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.EAGAIN) {
		return nil, backends.WithHint(fmt.Errorf("vmid %d monitor: %w (%v)", vmid, errMonitorHeld, err),
			"QEMU serves one QMP client at a time: a second poligon process lets go of "+sock+" within a moment; a QMP tool of your own must disconnect before poligon can snapshot, eject or resize this VM")
	}
	return nil, fmt.Errorf("vmid %d monitor: %w", vmid, err)
}

// monitorDo runs fn on the VM's monitor. A failure other than QEMU's own
// answer drops the connection, so the next call redials.
func (d *Driver) monitorDo(ctx context.Context, vmid int, fn func(*qmp.Client) error) error {
	return d.monitors.use(ctx, vmid, fn, func(err error) bool {
		var qerr *qmp.Error
		return !errors.As(err, &qerr)
	})
}

// runStates remembers, per VM, the state its monitor last answered, and
// which monitors another client holds (each watched until it is let go).
type runStates struct {
	ctx   context.Context // ends the watchers when the driver closes
	close context.CancelFunc

	mu       sync.Mutex
	seen     map[int]seenState
	watching map[int]bool
}

type seenState struct {
	status string
	at     time.Time
}

func newRunStates() *runStates {
	ctx, cancel := context.WithCancel(context.Background())
	return &runStates{ctx: ctx, close: cancel, seen: map[int]seenState{}, watching: map[int]bool{}}
}

func (r *runStates) record(vmid int, st qmp.Status) string {
	status := "paused"
	if st.Running {
		status = "running"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[vmid] = seenState{status, time.Now()}
	return status
}

func (r *runStates) forget(vmid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, vmid)
}

// status is running, paused or stopped from the process and its monitor.
// When another client holds the monitor it answers the state last seen
// (running when none was: QEMU starts a VM running) and a note that says
// so, and watches the monitor in the background: no later call waits for
// it until it is let go.
func (d *Driver) status(ctx context.Context, vmid int) (string, string) {
	if !d.alive(vmid) {
		return "stopped", ""
	}
	r := d.states
	r.mu.Lock()
	held := r.watching[vmid]
	r.mu.Unlock()
	if !held {
		qctx, cancel := context.WithTimeout(ctx, statusWait)
		var st qmp.Status
		err := d.monitorDo(qctx, vmid, func(c *qmp.Client) (err error) {
			st, err = c.QueryStatus(qctx)
			return err
		})
		cancel()
		switch {
		case err == nil:
			return r.record(vmid, st), ""
		case !errors.Is(err, errMonitorHeld) || ctx.Err() != nil: // not held, or the caller's own end
			return "unknown", ""
		}
		d.watchHeld(vmid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.seen[vmid]; ok {
		return s.status, fmt.Sprintf("as last seen %s ago: the VM's QMP monitor does not answer (another client holds it)", time.Since(s.at).Round(time.Second))
	}
	return "running", "not asked: the VM's QMP monitor does not answer (another client holds it); its QEMU runs"
}

// watchHeld waits, in the background, for the monitor another client holds:
// queued on QEMU's socket (or, while its accept queue is full, trying again
// each second), it reads the state once served and hangs up at once.
func (d *Driver) watchHeld(vmid int) {
	r := d.states
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watching[vmid] || r.ctx.Err() != nil {
		return
	}
	r.watching[vmid] = true
	go func() {
		defer func() {
			r.mu.Lock()
			delete(r.watching, vmid)
			r.mu.Unlock()
		}()
		for d.alive(vmid) {
			c, err := qmp.Dial(r.ctx, d.l.qmpSocket(vmid))
			if err == nil {
				if st, err := c.QueryStatus(r.ctx); err == nil {
					r.record(vmid, st)
				}
				c.Close()
				return
			}
			select { // the accept queue is full, or QEMU is going
			case <-r.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}
