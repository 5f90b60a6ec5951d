package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/internal/logs"
)

// dialAgent connects to a running VM's guest agent socket. QEMU accepts
// the connection even while no agent runs in the guest; the calls find out
// (qga syncs first).
func (d *Driver) dialAgent(ctx context.Context, vmid int) (*qga.Client, error) {
	if _, err := d.config(vmid); err != nil {
		return nil, err
	}
	if !d.alive(vmid) {
		return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotRunning)
	}
	c, err := qga.Dial(ctx, d.l.qgaSocket(vmid))
	if err != nil {
		return nil, fmt.Errorf("vmid %d guest agent socket: %w", vmid, err)
	}
	return c, nil
}

// agentDo runs fn against the guest agent. A failure other than the
// agent's own answer drops the connection, so the next call redials; "nobody
// answers" becomes ErrAgentNotRunning.
func (d *Driver) agentDo(ctx context.Context, vmid int, fn func(*qga.Client) error) error {
	start := time.Now()
	err := d.agents.use(ctx, vmid, fn, func(err error) bool {
		var gerr *qga.Error
		return !errors.As(err, &gerr)
	})
	if d.log.Enabled(ctx, slog.LevelDebug) {
		// The request line of the local backend, with the call's req.
		attrs := []any{"vmid", vmid, "ms", time.Since(start).Milliseconds()}
		if err != nil {
			shown := logs.Cut(err.Error(), err)
			attrs = append(attrs, "err", shown.Safe)
		}
		d.log.DebugContext(ctx, "qemu: guest agent request", attrs...)
	}
	var gerr *qga.Error
	switch {
	case err == nil, errors.As(err, &gerr), errors.Is(err, backends.ErrNotRunning), errors.Is(err, backends.ErrNotFound):
		return err
	case errors.Is(err, qga.ErrNoAgent) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("vmid %d: %w", vmid, backends.ErrAgentNotRunning)
	}
	return fmt.Errorf("vmid %d guest agent: %w", vmid, err)
}

// GuestPing answers nil once the guest agent responds.
func (d *Driver) GuestPing(ctx context.Context, vmid int) error {
	return d.agentDo(ctx, vmid, func(c *qga.Client) error { return c.Ping(ctx) })
}

// ExecStart starts a program in the guest.
func (d *Driver) ExecStart(ctx context.Context, vmid int, req backends.ExecRequest) (int, error) {
	var pid int
	err := d.agentDo(ctx, vmid, func(c *qga.Client) (err error) {
		pid, err = c.Exec(ctx, qga.ExecRequest{Path: req.Path, Args: req.Args, Env: req.Env, Input: req.Input, CaptureOutput: true})
		return err
	})
	return pid, err
}

// ExecStatus reports on a program started with ExecStart.
func (d *Driver) ExecStatus(ctx context.Context, vmid int, pid int) (backends.ExecStatus, error) {
	var st qga.ExecStatus
	err := d.agentDo(ctx, vmid, func(c *qga.Client) (err error) {
		st, err = c.ExecStatus(ctx, pid)
		return err
	})
	return backends.ExecStatus{
		Exited: st.Exited, ExitCode: st.ExitCode, Signal: st.Signal,
		Stdout: st.Stdout, Stderr: st.Stderr,
		OutTruncated: st.OutTruncated, ErrTruncated: st.ErrTruncated,
	}, err
}

// ReadFile reads a window of a guest file.
func (d *Driver) ReadFile(ctx context.Context, vmid int, path string, offset, max int64) ([]byte, int64, error) {
	var data []byte
	var size int64
	err := d.agentDo(ctx, vmid, func(c *qga.Client) (err error) {
		data, size, err = c.ReadFile(ctx, path, offset, max)
		return err
	})
	return data, size, err
}

// WriteFile writes a guest file whole.
func (d *Driver) WriteFile(ctx context.Context, vmid int, path string, data []byte) error {
	return d.agentDo(ctx, vmid, func(c *qga.Client) error { return c.WriteFile(ctx, path, data) })
}

// Interfaces lists the guest's network interfaces.
func (d *Driver) Interfaces(ctx context.Context, vmid int) ([]backends.Interface, error) {
	var ifs []qga.Interface
	err := d.agentDo(ctx, vmid, func(c *qga.Client) (err error) {
		ifs, err = c.NetworkInterfaces(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return qga.Backend(ifs), nil
}
