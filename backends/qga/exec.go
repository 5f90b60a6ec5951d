package qga

import (
	"context"
	"fmt"
	"unicode/utf8"
)

// ExecRequest starts a program in the guest: Path with Args, not through a
// shell. Path, Args and Env travel as JSON strings and must be valid UTF-8;
// carry binary data in Input.
type ExecRequest struct {
	Path          string
	Args          []string
	Env           []string
	Input         []byte // the program's stdin
	CaptureOutput bool   // collect stdout and stderr for ExecStatus
}

// Exec starts a program and answers its pid in the guest.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (int, error) {
	if err := checkUTF8(req); err != nil {
		return 0, fmt.Errorf("qga guest-exec: %w", err)
	}
	args := struct {
		Path          string   `json:"path"`
		Arg           []string `json:"arg,omitempty"`
		Env           []string `json:"env,omitempty"`
		InputData     []byte   `json:"input-data,omitempty"` // encoding/json sends []byte as base64
		CaptureOutput bool     `json:"capture-output,omitempty"`
	}{req.Path, req.Args, req.Env, req.Input, req.CaptureOutput}
	var result struct {
		PID int `json:"pid"`
	}
	if err := c.Execute(ctx, "guest-exec", args, &result); err != nil {
		return 0, err
	}
	return result.PID, nil
}

func checkUTF8(req ExecRequest) error {
	if !utf8.ValidString(req.Path) {
		return fmt.Errorf("path %q is not valid UTF-8", req.Path)
	}
	for i, a := range req.Args {
		if !utf8.ValidString(a) {
			return fmt.Errorf("argument %d (%q) is not valid UTF-8: pass binary data as input", i, a)
		}
	}
	for i, e := range req.Env {
		if !utf8.ValidString(e) {
			return fmt.Errorf("environment entry %d is not valid UTF-8", i)
		}
	}
	return nil
}

// ExecStatus is the state of a program started with Exec. Output arrives only
// once the program has exited; qemu-ga keeps at most 16 MiB of each stream and
// sets the Truncated flags beyond that.
type ExecStatus struct {
	Exited       bool   `json:"exited"`
	ExitCode     int    `json:"exitcode"`
	Signal       int    `json:"signal"`
	Stdout       []byte `json:"out-data"` // base64 on the wire, decoded by encoding/json
	Stderr       []byte `json:"err-data"`
	OutTruncated bool   `json:"out-truncated"`
	ErrTruncated bool   `json:"err-truncated"`
}

// ExecStatus reports on a program started with Exec. Once it answers
// Exited, the agent forgets the pid: asking again is an error.
func (c *Client) ExecStatus(ctx context.Context, pid int) (ExecStatus, error) {
	var st ExecStatus
	err := c.Execute(ctx, "guest-exec-status", map[string]int{"pid": pid}, &st)
	return st, err
}
