package qmp

import (
	"context"
	"errors"
)

// Status is the run state of the VM: Status is QEMU's RunState ("running",
// "paused", "shutdown", "restore-vm", "inmigrate", "prelaunch", ...).
type Status struct {
	Status  string `json:"status"`
	Running bool   `json:"running"`
}

// QueryStatus reads the VM's run state.
func (c *Client) QueryStatus(ctx context.Context) (Status, error) {
	var st Status
	err := c.Execute(ctx, "query-status", nil, &st)
	return st, err
}

// Stop pauses the VM (event STOP).
func (c *Client) Stop(ctx context.Context) error { return c.Execute(ctx, "stop", nil, nil) }

// Cont resumes a paused VM (event RESUME).
func (c *Client) Cont(ctx context.Context) error { return c.Execute(ctx, "cont", nil, nil) }

// SystemPowerdown presses the ACPI power button (event POWERDOWN); the guest
// decides whether to shut down.
func (c *Client) SystemPowerdown(ctx context.Context) error {
	return c.Execute(ctx, "system_powerdown", nil, nil)
}

// SystemReset resets the VM at once, like the reset button (event RESET).
func (c *Client) SystemReset(ctx context.Context) error {
	return c.Execute(ctx, "system_reset", nil, nil)
}

// Quit ends QEMU at once. QEMU closes the connection right after: that (with
// or without a reply first) is success.
func (c *Client) Quit(ctx context.Context) error {
	select {
	case <-c.done:
		return c.closedError("quit")
	default:
	}
	err := c.Execute(ctx, "quit", nil, nil)
	if errors.Is(err, ErrClosed) && ctx.Err() == nil {
		return nil
	}
	return err
}
