package pve

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qga"
)

// Limits of PVE's agent endpoints.
const (
	// maxInputData is PVE's limit on exec input-data (characters; we send
	// one character per byte).
	maxInputData = 64 << 10
	// maxFileWriteRaw is the most one file-write carries: PVE takes at most
	// 61440 characters of content, which is base64 of 46080 bytes.
	maxFileWriteRaw = 46080
	// appendChunk is what each exec of a chunked write carries on stdin.
	appendChunk = 60 << 10
	// maxFileRead is what PVE's file-read returns at most.
	maxFileRead = 16 << 20
)

func agentPath(node string, vmid int, sub string) string { return vmPath(node, vmid) + "/agent/" + sub }

// agentCall makes one agent request: retrying is the caller's decision
// (hostapi's), since a command sent may have run. An agent that is not
// running, or busy ("got timeout"), is an error wrapping
// backends.ErrAgentNotRunning; a stopped VM's wraps both ErrNotRunning and
// ErrAgentNotRunning.
func (b *Backend) agentCall(ctx context.Context, vmid int, fn func(node string) error) error {
	err := b.withVM(ctx, vmid, fn)
	if errors.Is(err, backends.ErrNotRunning) && !errors.Is(err, backends.ErrAgentNotRunning) {
		return fmt.Errorf("%w (%w)", err, backends.ErrAgentNotRunning)
	}
	return err
}

// GuestPing answers nil once the agent answers agent/ping.
func (b *Backend) GuestPing(ctx context.Context, vmid int) error {
	return b.agentCall(ctx, vmid, func(node string) error {
		return b.post(ctx, fmt.Sprintf("ping the agent of vmid %d", vmid), agentPath(node, vmid, "ping"), nil, nil)
	})
}

// ExecStart starts a program through POST agent/exec (command as an array;
// PVE answers {"pid": N}). Input goes as input-data, one character per
// byte, so any bytes arrive intact (at most 64 KiB).
//
// Non-ASCII text in the path or arguments does not reach the guest intact
// through PVE, and PVE's exec has no environment: when either is needed,
// the command travels as a base64 shell script that the guest's /bin/sh
// decodes with base64 -d and runs with exec (POSIX guests only).
func (b *Backend) ExecStart(ctx context.Context, vmid int, req backends.ExecRequest) (int, error) {
	if req.Path == "" {
		return 0, errors.New("pve: exec: no program path")
	}
	if len(req.Input) > maxInputData {
		return 0, fmt.Errorf("pve: exec in vmid %d: the input is %d bytes, above PVE's %d-byte input-data limit; "+
			"write it to a file first (WriteFile) and redirect from it", vmid, len(req.Input), maxInputData)
	}
	command, err := agentCommand(req)
	if err != nil {
		return 0, err
	}
	body := map[string]any{"command": command}
	if req.Input != nil {
		body["input-data"] = latin1(req.Input)
	}
	var ans struct {
		PID flexInt `json:"pid"`
	}
	err = b.agentCall(ctx, vmid, func(node string) error {
		return b.post(ctx, fmt.Sprintf("exec %s in vmid %d", req.Path, vmid), agentPath(node, vmid, "exec"), body, &ans)
	})
	if err != nil {
		return 0, err
	}
	return int(ans.PID), nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// agentCommand answers the command array for PVE: the program and its
// arguments as they are, or a base64-carried shell script when they hold
// non-ASCII text or an environment is asked for.
func agentCommand(req backends.ExecRequest) ([]string, error) {
	plain := len(req.Env) == 0 && isASCII(req.Path)
	for _, a := range req.Args {
		plain = plain && isASCII(a)
	}
	if plain {
		return append([]string{req.Path}, req.Args...), nil
	}
	var script strings.Builder
	for _, e := range req.Env {
		k, v, ok := strings.Cut(e, "=")
		if !ok || !envName.MatchString(k) {
			return nil, fmt.Errorf("pve: exec: environment entry %q is not NAME=VALUE", k)
		}
		fmt.Fprintf(&script, "export %s=%s\n", k, shellQuote(v))
	}
	script.WriteString("exec " + shellQuote(req.Path))
	for _, a := range req.Args {
		script.WriteString(" " + shellQuote(a))
	}
	enc := base64.StdEncoding.EncodeToString([]byte(script.String()))
	return []string{"/bin/sh", "-c", `eval "$(printf %s ` + enc + ` | base64 -d)"`}, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ExecStatus reads agent/exec-status. PVE has already base64-decoded
// out-data and err-data and hands the bytes on as latin-1 characters;
// pveBytes turns them back into the bytes.
func (b *Backend) ExecStatus(ctx context.Context, vmid int, pid int) (backends.ExecStatus, error) {
	var ans struct {
		Exited       flexBool `json:"exited"`
		ExitCode     flexInt  `json:"exitcode"`
		Signal       flexInt  `json:"signal"`
		OutData      string   `json:"out-data"`
		ErrData      string   `json:"err-data"`
		OutTruncated flexBool `json:"out-truncated"`
		ErrTruncated flexBool `json:"err-truncated"`
	}
	err := b.agentCall(ctx, vmid, func(node string) error {
		return b.get(ctx, fmt.Sprintf("read exec status %d in vmid %d", pid, vmid), agentPath(node, vmid, "exec-status"),
			url.Values{"pid": {strconv.Itoa(pid)}}, &ans)
	})
	if err != nil {
		return backends.ExecStatus{}, err
	}
	return backends.ExecStatus{
		Exited: bool(ans.Exited), ExitCode: int(ans.ExitCode), Signal: int(ans.Signal),
		Stdout: pveBytes(ans.OutData), Stderr: pveBytes(ans.ErrData),
		OutTruncated: bool(ans.OutTruncated), ErrTruncated: bool(ans.ErrTruncated),
	}, nil
}

// ReadFile reads a guest file through agent/file-read, which always
// returns the whole file up to 16 MiB; the window is cut here. size is the
// file's size for files up to 16 MiB and 16 MiB (a lower bound) beyond; a
// window past the first 16 MiB is an error with a hint. A non-ASCII path
// is read with cat through exec (POSIX guests).
func (b *Backend) ReadFile(ctx context.Context, vmid int, path string, offset, max int64) ([]byte, int64, error) {
	if offset < 0 || max < 0 {
		return nil, 0, fmt.Errorf("pve: read %s: negative offset %d or length %d", path, offset, max)
	}
	data, truncated, err := b.readWhole(ctx, vmid, path)
	if err != nil {
		return nil, 0, err
	}
	size := int64(len(data))
	if max == 0 {
		return nil, size, nil
	}
	if offset >= size {
		if truncated {
			return nil, size, backends.WithHint(
				fmt.Errorf("pve: read %s at offset %d: PVE's agent/file-read returns only the first %d bytes of a file", path, offset, maxFileRead),
				fmt.Sprintf("read further with exec, e.g. tail -c +%d FILE | head -c %d", offset+1, max))
		}
		return nil, size, nil
	}
	end := min(offset+max, size)
	return data[offset:end], size, nil
}

// readWhole reads up to 16 MiB of a file: agent/file-read, or for a
// non-ASCII path (which does not reach the agent intact) the output of
// cat through exec.
func (b *Backend) readWhole(ctx context.Context, vmid int, path string) ([]byte, bool, error) {
	if !isASCII(path) {
		st, err := b.run(ctx, vmid, backends.ExecRequest{Path: "cat", Args: []string{"--", path}})
		if err != nil {
			return nil, false, fmt.Errorf("pve: read %s in vmid %d: %w", path, vmid, err)
		}
		if st.ExitCode != 0 {
			return nil, false, fmt.Errorf("pve: read %s in vmid %d: cat exited %d: %s", path, vmid, st.ExitCode,
				strings.TrimSpace(string(st.Stderr)))
		}
		return st.Stdout, st.OutTruncated, nil
	}
	var ans struct {
		Content   string   `json:"content"`
		Truncated flexBool `json:"truncated"`
	}
	err := b.agentCall(ctx, vmid, func(node string) error {
		return b.get(ctx, fmt.Sprintf("read %s in vmid %d", path, vmid), agentPath(node, vmid, "file-read"),
			url.Values{"file": {path}}, &ans)
	})
	if err != nil {
		return nil, false, err
	}
	return pveBytes(ans.Content), bool(ans.Truncated), nil
}

// WriteFile writes a guest file: up to 45 KiB (with an ASCII path) in one
// agent/file-write with encode=0 and our own base64; larger files, or
// non-ASCII paths, through exec of /bin/sh 'cat > FILE' then 'cat >> FILE'
// with 60 KiB of stdin per call (POSIX guests only).
func (b *Backend) WriteFile(ctx context.Context, vmid int, path string, data []byte) error {
	if path == "" {
		return errors.New("pve: write: no file path")
	}
	if isASCII(path) && len(data) <= maxFileWriteRaw {
		body := map[string]any{"file": path, "content": base64.StdEncoding.EncodeToString(data), "encode": 0}
		return b.agentCall(ctx, vmid, func(node string) error {
			return b.post(ctx, fmt.Sprintf("write %s in vmid %d", path, vmid), agentPath(node, vmid, "file-write"), body, nil)
		})
	}
	for off := 0; off == 0 || off < len(data); off += appendChunk {
		chunk := data[off:min(off+appendChunk, len(data))]
		script := `cat >> "$1"`
		if off == 0 {
			script = `cat > "$1"`
		}
		st, err := b.run(ctx, vmid, backends.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script, "sh", path}, Input: chunk})
		if err != nil {
			return fmt.Errorf("pve: write %s in vmid %d at byte %d of %d: %w", path, vmid, off, len(data), err)
		}
		if st.ExitCode != 0 || st.Signal != 0 {
			return fmt.Errorf("pve: write %s in vmid %d at byte %d of %d: /bin/sh exited %d: %s "+
				"(files above %d bytes are written in chunks with /bin/sh and cat, which the guest must have)",
				path, vmid, off, len(data), st.ExitCode, strings.TrimSpace(string(st.Stderr)), maxFileWriteRaw)
		}
	}
	return nil
}

// run execs a program once and waits for it to exit, within ctx
// (internalWait without a deadline). Waiting is polling exec-status, which
// goes on through an agent that is busy or briefly gone; the program
// itself is never sent twice.
func (b *Backend) run(ctx context.Context, vmid int, req backends.ExecRequest) (backends.ExecStatus, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, internalWait)
		defer cancel()
	}
	pid, err := b.ExecStart(ctx, vmid, req)
	if err != nil {
		return backends.ExecStatus{}, err
	}
	delay := 20 * time.Millisecond
	for {
		st, err := b.ExecStatus(ctx, vmid, pid)
		switch {
		case err == nil && st.Exited:
			return st, nil
		case err != nil && (!errors.Is(err, backends.ErrAgentNotRunning) || errors.Is(err, backends.ErrNotRunning)):
			return st, err
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return st, fmt.Errorf("pid %d: no exit status before the deadline (%w): %w", pid, ctx.Err(), err)
			}
			return st, fmt.Errorf("pid %d still running: %w", pid, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// Interfaces lists the guest's network interfaces (agent/network-get-interfaces).
func (b *Backend) Interfaces(ctx context.Context, vmid int) ([]backends.Interface, error) {
	var ans struct {
		Result []struct {
			Name        string `json:"name"`
			HWAddr      string `json:"hardware-address"`
			IPAddresses []struct {
				Type    string  `json:"ip-address-type"`
				Address string  `json:"ip-address"`
				Prefix  flexInt `json:"prefix"`
			} `json:"ip-addresses"`
		} `json:"result"`
	}
	err := b.agentCall(ctx, vmid, func(node string) error {
		return b.get(ctx, fmt.Sprintf("list the interfaces of vmid %d", vmid), agentPath(node, vmid, "network-get-interfaces"), nil, &ans)
	})
	if err != nil {
		return nil, err
	}
	ifs := make([]qga.Interface, len(ans.Result))
	for i, r := range ans.Result {
		ifs[i] = qga.Interface{Name: r.Name, HardwareAddress: r.HWAddr}
		for _, a := range r.IPAddresses {
			ifs[i].IPAddresses = append(ifs[i].IPAddresses, qga.IPAddress{Type: a.Type, Address: a.Address, Prefix: int(a.Prefix)})
		}
	}
	return qga.Backend(ifs), nil
}
