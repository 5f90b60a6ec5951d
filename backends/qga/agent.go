package qga

import (
	"context"
	"fmt"
)

// Ping answers nil when the agent responds.
func (c *Client) Ping(ctx context.Context) error {
	return c.Execute(ctx, "guest-ping", nil, nil)
}

// Info is what guest-info reports.
type Info struct {
	Version  string    `json:"version"`
	Commands []Command `json:"supported_commands"`
}

// Command is one agent command and whether it is enabled (qemu-ga -b and the
// guest's configuration can disable commands).
type Command struct {
	Name            string `json:"name"`
	Enabled         bool   `json:"enabled"`
	SuccessResponse bool   `json:"success-response"`
}

// Enabled reports whether the agent offers the named command enabled.
func (i Info) Enabled(name string) bool {
	for _, cmd := range i.Commands {
		if cmd.Name == name {
			return cmd.Enabled
		}
	}
	return false
}

// Info asks the agent for its version and commands.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.Execute(ctx, "guest-info", nil, &info)
	return info, err
}

// Shutdown asks the guest to shut down; mode is "powerdown" (the agent's
// default when empty), "halt" or "reboot". The agent sends no reply on
// success, so success means the command went out. An error reply (a disabled
// command, say) is left in the stream and discarded by the next call's sync.
func (c *Client) Shutdown(ctx context.Context, mode string) error {
	const command = "guest-shutdown"
	var args any
	if mode != "" {
		args = map[string]string{"mode": mode}
	}
	return c.withLock(ctx, command, func() error {
		if err := c.prepare(ctx); err != nil {
			return fmt.Errorf("qga %s: %w", command, err)
		}
		line, err := encodeCommand(command, args)
		if err != nil {
			return fmt.Errorf("qga %s: encoding arguments: %w", command, err)
		}
		c.stale = true
		if _, err := c.conn.Write(line); err != nil {
			return fmt.Errorf("qga %s: %w", command, c.ioError(ctx, "sending the command", err, false))
		}
		return nil
	})
}
