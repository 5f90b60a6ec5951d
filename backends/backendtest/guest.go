package backendtest

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/poligon/poligon/backends"
)

// runningLocked answers a VM whose guest can be reached: unknown wraps
// ErrNotFound, stopped (or a template) wraps ErrNotRunning. b.mu is held.
func (b *Backend) runningLocked(vmid int) (*vm, error) {
	v, err := b.vmLocked(vmid)
	if err != nil {
		return nil, err
	}
	if v.info.Template || v.info.Status != "running" {
		return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotRunning)
	}
	return v, nil
}

// agentLocked answers a VM whose agent answers: a running VM with its agent
// down (SetAgent) wraps ErrAgentNotRunning. b.mu is held.
func (b *Backend) agentLocked(vmid int) (*vm, error) {
	v, err := b.runningLocked(vmid)
	if err != nil {
		return nil, err
	}
	if v.agentDown {
		return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrAgentNotRunning)
	}
	return v, nil
}

// SetExec decides what guest programs do: fn answers the status a program
// started with req reaches. One that has not Exited keeps running (its
// ExecStatus says so) until FinishExec. nil restores the default: every
// program exits 0 at once with no output.
func (b *Backend) SetExec(fn func(vmid int, req backends.ExecRequest) backends.ExecStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.exec = fn
}

// FinishExec ends a running guest program with st (Exited is set).
func (b *Backend) FinishExec(vmid, pid int, st backends.ExecStatus) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return err
	}
	if _, ok := v.procs[pid]; !ok {
		return fmt.Errorf("backendtest: vmid %d has no program %d", vmid, pid)
	}
	st.Exited = true
	v.procs[pid] = &st
	return nil
}

// File answers a guest file's content, without recording a call.
func (b *Backend) File(vmid int, path string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vms[vmid]
	if !ok {
		return nil, false
	}
	data, ok := v.files[path]
	return slices.Clone(data), ok
}

// SetInterfaces sets what a VM's agent answers to Interfaces.
func (b *Backend) SetInterfaces(vmid int, ifs []backends.Interface) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.vms[vmid]; ok {
		v.ifaces = slices.Clone(ifs)
	}
}

// GuestPing answers nil when the VM runs and its agent is up.
func (b *Backend) GuestPing(ctx context.Context, vmid int) error {
	if err := b.enter(ctx, "GuestPing", vmid, nil); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_, err := b.agentLocked(vmid)
	return err
}

// ExecStart starts a program (see SetExec) and answers its pid. The call
// renders as "ExecStart vmid path"; Detail holds the whole request.
func (b *Backend) ExecStart(ctx context.Context, vmid int, req backends.ExecRequest) (int, error) {
	if err := b.enter(ctx, "ExecStart", vmid, req, req.Path); err != nil {
		return 0, err
	}
	b.mu.Lock()
	v, err := b.agentLocked(vmid)
	fn := b.exec
	b.nextPID++
	pid := b.nextPID
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	st := backends.ExecStatus{Exited: true}
	if fn != nil {
		st = fn(vmid, req) // unlocked: fn may look at the fake
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v.procs[pid] = &st
	return pid, nil
}

// ExecStatus reports on a program started with ExecStart.
func (b *Backend) ExecStatus(ctx context.Context, vmid int, pid int) (backends.ExecStatus, error) {
	if err := b.enter(ctx, "ExecStatus", vmid, nil, strconv.Itoa(pid)); err != nil {
		return backends.ExecStatus{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.agentLocked(vmid)
	if err != nil {
		return backends.ExecStatus{}, err
	}
	st, ok := v.procs[pid]
	if !ok {
		// qemu-ga's answer for a pid it does not know (or reaped).
		return backends.ExecStatus{}, fmt.Errorf("vmid %d guest agent: Invalid parameter 'pid'", vmid)
	}
	return *st, nil
}

// ReadFile reads at most max bytes of a guest file from offset.
func (b *Backend) ReadFile(ctx context.Context, vmid int, path string, offset, max int64) ([]byte, int64, error) {
	if err := b.enter(ctx, "ReadFile", vmid, nil, path, strconv.FormatInt(offset, 10), strconv.FormatInt(max, 10)); err != nil {
		return nil, 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.agentLocked(vmid)
	if err != nil {
		return nil, 0, err
	}
	data, ok := v.files[path]
	if !ok {
		return nil, 0, fmt.Errorf("vmid %d guest agent: failed to open file '%s': No such file or directory", vmid, path)
	}
	size := int64(len(data))
	start := min(offset, size)
	return slices.Clone(data[start:min(start+max, size)]), size, nil
}

// WriteFile writes a guest file whole. The call renders as "WriteFile vmid
// path"; Detail holds the data.
func (b *Backend) WriteFile(ctx context.Context, vmid int, path string, data []byte) error {
	if err := b.enter(ctx, "WriteFile", vmid, slices.Clone(data), path); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.agentLocked(vmid)
	if err != nil {
		return err
	}
	v.files[path] = slices.Clone(data)
	return nil
}

// Interfaces answers the VM's interfaces (a loopback unless SetInterfaces).
func (b *Backend) Interfaces(ctx context.Context, vmid int) ([]backends.Interface, error) {
	if err := b.enter(ctx, "Interfaces", vmid, nil); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.agentLocked(vmid)
	if err != nil {
		return nil, err
	}
	return slices.Clone(v.ifaces), nil
}
