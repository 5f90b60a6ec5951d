package qmp

import (
	"context"
	"fmt"
	"strings"
)

// HumanMonitorCommand runs an HMP command line and answers its output. HMP
// reports failures as ordinary output starting with "Error:"; those become
// errors carrying the message.
func (c *Client) HumanMonitorCommand(ctx context.Context, cmd string) (string, error) {
	var out string
	if err := c.Execute(ctx, "human-monitor-command", map[string]string{"command-line": cmd}, &out); err != nil {
		return "", err
	}
	if msg, failed := strings.CutPrefix(out, "Error:"); failed {
		return out, fmt.Errorf("qmp: HMP %q: %s", cmd, strings.TrimSpace(msg))
	}
	return out, nil
}

// Screendump writes the VM's display as a PNG to filename, on the machine
// QEMU runs on (format png needs QEMU 7.1+).
func (c *Client) Screendump(ctx context.Context, filename string) error {
	return c.Execute(ctx, "screendump", map[string]string{"filename": filename, "format": "png"}, nil)
}
