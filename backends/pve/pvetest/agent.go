package pvetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"

	"github.com/poligon/poligon/backends/qga"
)

// PVE's limits on the agent endpoints.
const (
	maxFileRead    = 16 << 20
	maxFileWrite   = 61440 // characters of content
	maxInputData   = 64 << 10
	agentCallLimit = 10 * time.Second // PVE's own agent timeout
)

// agentFor checks that a call can reach the guest agent of its VM and
// answers the real agent to forward to. The model's answers are PVE's: a
// stopped VM, no agent configured, an agent down or still booting, or a
// busy agent ("got timeout").
func (s *Server) agentFor(c *call, command string) (*agentProc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmForAny(c, agentPrivs(command)...)
	if err != nil {
		return nil, err
	}
	switch {
	case !v.running:
		return nil, fail(500, "VM %d is not running", v.id)
	case !v.agentEnabled():
		return nil, fail(500, "No QEMU guest agent configured")
	case v.agentDown || s.agent == nil || time.Since(v.startedAt) < s.opts.AgentBootDelay:
		return nil, fail(500, "QEMU guest agent is not running")
	case s.agentBusy > 0:
		s.agentBusy--
		return nil, fail(500, "VM %d qmp command 'guest-%s' failed - got timeout", v.id, command)
	}
	return s.agent, nil
}

// agentPrivs are the privileges that allow an agent endpoint: PVE 8's
// VM.Monitor, or those qemu-server 9 checks.
func agentPrivs(command string) []string {
	switch command {
	case "ping", "network-get-interfaces":
		return []string{"VM.Monitor", "VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"}
	case "file-read":
		return []string{"VM.Monitor", "VM.GuestAgent.FileRead", "VM.GuestAgent.Unrestricted"}
	case "file-write":
		return []string{"VM.Monitor", "VM.GuestAgent.FileWrite", "VM.GuestAgent.Unrestricted"}
	}
	return []string{"VM.Monitor", "VM.GuestAgent.Unrestricted"} // exec, exec-status
}

// forward runs one agent command with PVE's timeout; agent errors become
// PVE's 500 answers.
func (s *Server) forward(c *call, a *agentProc, command string, fn func(ctx context.Context, q *qga.Client) error) error {
	ctx, cancel := context.WithTimeout(c.r.Context(), agentCallLimit)
	defer cancel()
	q, err := a.conn(ctx)
	if err != nil {
		return fail(500, "QEMU guest agent is not running")
	}
	err = fn(ctx, q)
	var agentErr *qga.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &agentErr):
		return fail(500, "VM %s qmp command 'guest-%s' failed - %s", c.vars["vmid"], command, agentErr.Desc)
	case errors.Is(err, context.DeadlineExceeded):
		a.drop(q)
		return fail(500, "VM %s qmp command 'guest-%s' failed - got timeout", c.vars["vmid"], command)
	default:
		a.drop(q)
		return fail(500, "QEMU guest agent is not running")
	}
}

func (s *Server) agentPing(c *call) (any, error) {
	a, err := s.agentFor(c, "ping")
	if err != nil {
		return nil, err
	}
	err = s.forward(c, a, "ping", func(ctx context.Context, q *qga.Client) error { return q.Ping(ctx) })
	return map[string]any{"result": map[string]any{}}, err
}

func (s *Server) agentInterfaces(c *call) (any, error) {
	a, err := s.agentFor(c, "network-get-interfaces")
	if err != nil {
		return nil, err
	}
	var result json.RawMessage
	err = s.forward(c, a, "network-get-interfaces", func(ctx context.Context, q *qga.Client) error {
		return q.Execute(ctx, "guest-network-get-interfaces", nil, &result)
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"result": result}, nil
}

// agentExec is POST agent/exec: command is an array (program + args); the
// answer is {"pid": N} without a result wrapper. PVE hands non-ASCII
// command bytes on mangled (modelled as UTF-8 encoded twice) and refuses
// input-data above U+00FF with Perl's "Wide character".
func (s *Server) agentExec(c *call) (any, error) {
	command := c.params["command"]
	if len(command) == 0 || command[0] == "" {
		return nil, paramError("command", "property is missing and it is not optional")
	}
	var input []byte
	if c.has("input-data") {
		in := c.str("input-data")
		if len([]rune(in)) > maxInputData {
			return nil, paramError("input-data", "value may only be %d characters long", maxInputData)
		}
		var ok bool
		if input, ok = latin1Bytes(in); !ok {
			return nil, fail(500, "Wide character in subroutine entry at /usr/share/perl5/PVE/QemuServer/Agent.pm line 110.")
		}
	}
	a, err := s.agentFor(c, "exec")
	if err != nil {
		return nil, err
	}
	args := make([]string, len(command))
	for i, arg := range command {
		args[i] = mangleUTF8(arg)
	}
	var pid int
	err = s.forward(c, a, "exec", func(ctx context.Context, q *qga.Client) error {
		var err error
		pid, err = q.Exec(ctx, qga.ExecRequest{Path: args[0], Args: args[1:], Input: input, CaptureOutput: true})
		return err
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"pid": pid}, nil
}

// agentExecStatus is GET agent/exec-status: PVE decodes out-data and
// err-data (and hands the bytes on as latin-1 characters) and turns the
// agent's booleans into 0/1.
func (s *Server) agentExecStatus(c *call) (any, error) {
	pid, err := c.integer("pid", -1)
	if err != nil {
		return nil, err
	}
	if pid < 0 {
		return nil, paramError("pid", "property is missing and it is not optional")
	}
	a, err := s.agentFor(c, "exec-status")
	if err != nil {
		return nil, err
	}
	var st struct {
		Exited       bool   `json:"exited"`
		ExitCode     *int   `json:"exitcode"`
		Signal       *int   `json:"signal"`
		OutData      string `json:"out-data"`
		ErrData      string `json:"err-data"`
		OutTruncated *bool  `json:"out-truncated"`
		ErrTruncated *bool  `json:"err-truncated"`
	}
	err = s.forward(c, a, "exec-status", func(ctx context.Context, q *qga.Client) error {
		return q.Execute(ctx, "guest-exec-status", map[string]int{"pid": pid}, &st)
	})
	if err != nil {
		return nil, err
	}
	out := map[string]any{"exited": b2i(st.Exited)}
	if st.ExitCode != nil {
		out["exitcode"] = *st.ExitCode
	}
	if st.Signal != nil {
		out["signal"] = *st.Signal
	}
	for key, b64 := range map[string]string{"out-data": st.OutData, "err-data": st.ErrData} {
		if b64 == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fail(500, "unable to decode %s: %v", key, err)
		}
		out[key] = latin1String(raw)
	}
	if st.OutTruncated != nil {
		out["out-truncated"] = b2i(*st.OutTruncated)
	}
	if st.ErrTruncated != nil {
		out["err-truncated"] = b2i(*st.ErrTruncated)
	}
	return out, nil
}

// agentFileRead is GET agent/file-read: at most 16 MiB, content handed on
// as latin-1 characters, "truncated" when more remains.
func (s *Server) agentFileRead(c *call) (any, error) {
	file, err := c.required("file")
	if err != nil {
		return nil, err
	}
	a, err := s.agentFor(c, "file-read")
	if err != nil {
		return nil, err
	}
	var data []byte
	truncated := false
	err = s.forward(c, a, "file-open", func(ctx context.Context, q *qga.Client) error {
		h, err := q.FileOpen(ctx, mangleUTF8(file), "r")
		if err != nil {
			return err
		}
		defer q.FileClose(ctx, h)
		for {
			chunk, eof, err := q.FileRead(ctx, h, 1<<20)
			if err != nil {
				return err
			}
			data = append(data, chunk...)
			if len(data) > maxFileRead {
				data, truncated = data[:maxFileRead], true
				return nil
			}
			if eof || len(chunk) == 0 {
				return nil
			}
		}
	})
	if err != nil {
		return nil, err
	}
	out := map[string]any{"content": latin1String(data), "bytes-read": len(data)}
	if truncated {
		out["truncated"] = 1
	}
	return out, nil
}

// agentFileWrite is POST agent/file-write: content is at most 61440
// characters; with encode=1 (the default) PVE base64-encodes it (latin-1
// only), with encode=0 it must already be base64.
func (s *Server) agentFileWrite(c *call) (any, error) {
	file, err := c.required("file")
	if err != nil {
		return nil, err
	}
	if !c.has("content") {
		return nil, paramError("content", "property is missing and it is not optional")
	}
	content := c.str("content")
	if len([]rune(content)) > maxFileWrite {
		return nil, paramError("content", "value may only be %d characters long", maxFileWrite)
	}
	encode, err := c.boolean("encode", true)
	if err != nil {
		return nil, err
	}
	var data []byte
	if encode {
		var ok bool
		if data, ok = latin1Bytes(content); !ok {
			return nil, fail(500, "Wide character in subroutine entry at /usr/share/perl5/PVE/API2/Qemu/Agent.pm line 497.")
		}
	} else if data, err = base64.StdEncoding.DecodeString(content); err != nil {
		return nil, fail(500, "VM %s qmp command 'guest-file-write' failed - Invalid base64 data", c.vars["vmid"])
	}
	a, err := s.agentFor(c, "file-write")
	if err != nil {
		return nil, err
	}
	err = s.forward(c, a, "file-write", func(ctx context.Context, q *qga.Client) error {
		h, err := q.FileOpen(ctx, mangleUTF8(file), "w")
		if err != nil {
			return err
		}
		if _, err := q.FileWrite(ctx, h, data); err != nil {
			q.FileClose(ctx, h)
			return err
		}
		return q.FileClose(ctx, h)
	})
	return nil, err
}

// latin1String hands bytes on the way PVE's JSON encoder does with a Perl
// byte string: every byte becomes the character of the same number.
func latin1String(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// latin1Bytes is the reverse, as Perl's encode_base64 downgrades a string:
// false when a character is above U+00FF ("Wide character").
func latin1Bytes(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xFF {
			return nil, false
		}
		out = append(out, byte(r))
	}
	return out, true
}

// mangleUTF8 models how non-ASCII command text reaches the agent through
// PVE: its UTF-8 bytes are taken as latin-1 characters and encoded again.
func mangleUTF8(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return latin1String([]byte(s))
		}
	}
	return s
}
