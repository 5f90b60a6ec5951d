package hostapi

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/hostapi/calls"
)

// ExecResult is a finished guest command.
type ExecResult struct {
	Exit      int
	Signal    int
	Stdout    []byte
	Stderr    []byte
	Truncated bool // the agent cut the output
}

// shellArgs wraps a command for /bin/sh with umask 022 (qemu-ga's own 077
// makes files written with > invisible to a desktop user). Bytes that a
// backend's transport cannot carry (non-ASCII through Proxmox) are the
// backend's to encode.
func shellArgs(command string) []string {
	return []string{"-c", "umask 022\n" + command}
}

func (v *VM) guest() (backends.Guest, error) {
	return backends.As[backends.Guest](v.c.be, "guest agent")
}

// agentError explains an agent failure to the caller.
func (v *VM) agentError(err error) error {
	switch {
	case errors.Is(err, backends.ErrNotRunning):
		return &Error{Message: fmt.Sprintf("vmid %d is not running", v.info.VMID), Hint: "start it with vm_start", Err: err}
	case errors.Is(err, backends.ErrAgentDisabled):
		return &Error{Message: fmt.Sprintf("vmid %d has no guest agent configured", v.info.VMID),
			Hint: "enable the VM's guest agent option (Proxmox: Options, QEMU Guest Agent) and run qemu-guest-agent in the guest; until then drive it over the console (ui_*)", Err: err}
	case errors.Is(err, backends.ErrAgentNotRunning):
		return &Error{Message: fmt.Sprintf("the guest agent of vmid %d does not answer", v.info.VMID),
			Hint: "the VM may still be booting: vm_wait_boot waits for it; the guest needs qemu-guest-agent running", Err: err}
	}
	return wrap(err, "", "vmid %d guest agent", v.info.VMID)
}

// retryAgent is the one place agent calls are retried (backends send each
// request once): it calls fn until it succeeds, fails for another reason
// than an agent that does not answer (yet), or ctx ends, so an agent busy
// with IO or still starting is waited for rather than reported. Only calls
// that are safe to repeat go through it (ping, exec status, file read): a
// state-changing call (exec start, file write) is sent once, after a ping
// has found the agent answering.
func retryAgent(ctx context.Context, fn func(ctx context.Context) error) error {
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(tctx)
		cancel()
		// A stopped VM's agent will not answer by waiting (PVE's error wraps
		// both ErrNotRunning and ErrAgentNotRunning).
		if err == nil || !errors.Is(err, backends.ErrAgentNotRunning) || errors.Is(err, backends.ErrNotRunning) || errors.Is(err, backends.ErrAgentDisabled) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// waitAgent waits until the agent answers a ping, within ctx.
func (v *VM) waitAgent(ctx context.Context, g backends.Guest) error {
	if err := retryAgent(ctx, func(ctx context.Context) error { return g.GuestPing(ctx, v.info.VMID) }); err != nil {
		return v.agentError(err)
	}
	return nil
}

// Exec runs a shell command as root in the guest and waits for it, at most
// timeout (default 120 s).
func (v *VM) Exec(ctx context.Context, command string, timeout time.Duration) (ExecResult, error) {
	return v.execArgs(ctx, "/bin/sh", shellArgs(command), timeout, command)
}

func (v *VM) execArgs(ctx context.Context, path string, args []string, timeout time.Duration, what string) (ExecResult, error) {
	g, err := v.guest()
	if err != nil {
		return ExecResult{}, err
	}
	if timeout <= 0 {
		timeout = calls.DefaultSeconds(calls.Exec, "timeout")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := v.waitAgent(ctx, g); err != nil {
		return ExecResult{}, err
	}
	// Once: a guest-exec that went out unanswered may have run.
	pid, err := g.ExecStart(ctx, v.info.VMID, backends.ExecRequest{Path: path, Args: args})
	if err != nil {
		return ExecResult{}, v.agentError(err)
	}
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		var st backends.ExecStatus
		err := retryAgent(ctx, func(ctx context.Context) (err error) {
			st, err = g.ExecStatus(ctx, v.info.VMID, pid)
			return err
		})
		if err != nil && ctx.Err() == nil {
			return ExecResult{}, v.agentError(err)
		}
		if err == nil && st.Exited {
			return ExecResult{Exit: st.ExitCode, Signal: st.Signal, Stdout: st.Stdout, Stderr: st.Stderr,
				Truncated: st.OutTruncated || st.ErrTruncated}, nil
		}
		select {
		case <-ctx.Done():
			return ExecResult{}, &Error{
				Message: fmt.Sprintf("command still running after %s: %s", timeout.Round(time.Second), shorten(what, 80)),
				Hint:    "vm_run runs long commands detached and can be called again to keep waiting", Err: ctx.Err()}
		case <-time.After(delay):
		}
	}
}

// ExpectFailed is an expect whose command failed or missed its text.
type ExpectFailed struct {
	Command string
	Result  ExecResult
	Missing string // the text stdout did not contain, when that was the failure
}

func (e *ExpectFailed) Error() string {
	return fmt.Sprintf("%s, stdout %q, stderr %q", e.head(), lastChars(e.Result.Stdout, 1500), lastChars(e.Result.Stderr, 1500))
}

// head is what failed, without the guest's output.
func (e *ExpectFailed) head() string {
	why := fmt.Sprintf("exitcode %d", e.Result.Exit)
	if e.Missing != "" && e.Result.Exit == 0 {
		why = fmt.Sprintf("stdout does not contain %q", e.Missing)
	}
	return "expect failed: " + why
}

// SafeLen marks where the guest's output begins (logs.Payloaded): a log
// line stops there, since the output can carry a password.
func (e *ExpectFailed) SafeLen() int { return len(e.head()) }

// Expect runs a command and fails unless it exits 0 and, when contains is
// given, its stdout contains it.
func (v *VM) Expect(ctx context.Context, command string, timeout time.Duration, contains string) (ExecResult, error) {
	res, err := v.Exec(ctx, command, timeout)
	if err != nil {
		return res, err
	}
	if res.Exit != 0 || contains != "" && !strings.Contains(string(res.Stdout), contains) {
		ef := &ExpectFailed{Command: command, Result: res, Missing: contains}
		return res, &Error{Message: ef.Error(), Err: ef,
			Hint: "the command's own output is above; fix the command or the state it checks"}
	}
	return res, nil
}

// RunState is where a detached command stands.
type RunState struct {
	State   string // done, failed, running
	Exit    int
	Elapsed time.Duration
	Tail    string // last 20 lines of its output
	Note    string // e.g. the agent stopped answering (a reboot)
}

//go:embed guestsh/run.sh
var runScript string

// runDir is where vm_run keeps its state in the guest: on disk, so a run
// survives a reboot of a real distribution.
const runDir = "/var/tmp/poligon-run"

// Run starts a long command detached, or picks up the run of the same
// command, and waits up to wait (at most MaxWait in a tool call). A
// finished run is reported, not repeated, unless restart is set. An agent
// that stops answering (the command rebooted the guest) is waited for.
func (v *VM) Run(ctx context.Context, command string, wait time.Duration, restart bool) (RunState, error) {
	sum := sha256.Sum256([]byte(command))
	dir := runDir + "/" + hex.EncodeToString(sum[:8])
	b64 := base64.StdEncoding.EncodeToString([]byte(command))
	limit := v.c.clampWait(wait)
	deadline := time.Now().Add(limit)
	stop := v.c.reportWhile(ctx, fmt.Sprintf("waiting for %s on vmid %d", shorten(command, 60), v.info.VMID), limit)
	defer stop()
	action := "start"
	if restart {
		action = "restart"
	}
	var last RunState
	for {
		remaining := time.Until(deadline)
		res, err := v.execArgs(ctx, "/bin/sh", []string{"-c", runScript, "poligon-run", dir, action, b64}, max(min(remaining, 20*time.Second), 5*time.Second), "vm_run state")
		switch {
		case err == nil && res.Exit != 0:
			return RunState{}, Failf("the guest needs a POSIX sh with base64, setsid and stat", "vm_run could not start the command: exit %d: %s", res.Exit, strings.TrimSpace(string(res.Stderr)))
		case err == nil:
			action = "status"
			last = parseRunState(string(res.Stdout))
			if last.State != "running" {
				return last, nil
			}
		case errors.Is(err, backends.ErrNotRunning), errors.Is(err, backends.ErrAgentDisabled):
			return RunState{}, v.agentError(err)
		default:
			// A reboot in progress: keep waiting for the agent.
			last.Note = "the guest agent is not answering (the guest may be rebooting); call again to keep waiting"
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if last.State == "" {
				last.State = "running"
			}
			return last, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Second, time.Until(deadline))):
		}
	}
}

func parseRunState(out string) RunState {
	head, tail, _ := strings.Cut(out, "\n")
	f := strings.Fields(head)
	st := RunState{State: "running", Tail: strings.TrimRight(tail, "\n")}
	if len(f) != 3 {
		return st
	}
	exit, _ := strconv.Atoi(f[1])
	secs, _ := strconv.Atoi(f[2])
	st.Exit, st.Elapsed = exit, time.Duration(secs)*time.Second
	switch f[0] {
	case "done":
		st.State = "done"
		if exit != 0 {
			st.State = "failed"
		}
	case "lost":
		st.State = "failed"
		st.Note = "the run ended without an exit status (the guest rebooted or the process was killed); restart=true runs it again"
	}
	return st
}

// fileTimeout bounds a file read or write, the wait for an agent that does
// not answer yet included: a call must not wait for ever on a VM whose
// agent never comes.
const fileTimeout = 2 * time.Minute

// ReadFile reads up to max bytes (default 16384) of a guest file from
// offset, and answers the file's size.
func (v *VM) ReadFile(ctx context.Context, path string, offset, max int64) ([]byte, int64, error) {
	if max <= 0 {
		max = int64(calls.DefaultInt(calls.ReadFile, "max"))
	}
	if offset < 0 {
		return nil, 0, Failf("offset counts bytes from the start of the file", "offset %d is negative", offset)
	}
	g, err := v.guest()
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	var data []byte
	var size int64
	err = retryAgent(ctx, func(ctx context.Context) (err error) {
		data, size, err = g.ReadFile(ctx, v.info.VMID, path, offset, max)
		return err
	})
	if err != nil {
		return nil, 0, v.fileError(err, path)
	}
	return data, size, nil
}

// WriteFile writes a guest file whole.
func (v *VM) WriteFile(ctx context.Context, path string, data []byte) error {
	g, err := v.guest()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	if err := v.waitAgent(ctx, g); err != nil {
		return err
	}
	if err := g.WriteFile(ctx, v.info.VMID, path, data); err != nil { // once: see retryAgent
		return v.fileError(err, path)
	}
	return nil
}

func (v *VM) fileError(err error, path string) error {
	if errors.Is(err, backends.ErrNotRunning) || errors.Is(err, backends.ErrAgentNotRunning) || errors.Is(err, backends.ErrAgentDisabled) {
		return v.agentError(err)
	}
	return wrap(err, "check the path with vm_exec (ls -l)", "%s", path)
}

// WaitBoot waits until the guest agent answers, at most timeout (capped
// at MaxWait in a tool call). It answers whether it did and how
// long it took.
func (v *VM) WaitBoot(ctx context.Context, timeout time.Duration) (bool, time.Duration, error) {
	limit := v.c.clampWait(timeout)
	g, err := v.guest()
	if err != nil {
		return false, 0, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stop := v.c.reportWhile(ctx, fmt.Sprintf("waiting for the guest agent of vmid %d", v.info.VMID), limit)
	defer stop()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		err := g.GuestPing(pctx, v.info.VMID)
		pcancel()
		if err == nil {
			return true, time.Since(start), nil
		}
		if errors.Is(err, backends.ErrNotRunning) || errors.Is(err, backends.ErrAgentDisabled) {
			return false, time.Since(start), v.agentError(err)
		}
		select {
		case <-ctx.Done():
			return false, time.Since(start), nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// IPv4 answers the first global IPv4 address the guest agent reports (not
// loopback, not link-local), or "" while the guest has none.
func (v *VM) IPv4(ctx context.Context) (string, error) {
	g, err := v.guest()
	if err != nil {
		return "", err
	}
	ifs, err := g.Interfaces(ctx, v.info.VMID)
	if err != nil {
		return "", v.agentError(err)
	}
	for _, i := range ifs {
		for _, a := range i.Addresses {
			if ip := a.IP.To4(); ip != nil && ip.IsGlobalUnicast() {
				return ip.String(), nil
			}
		}
	}
	return "", nil
}

//go:embed guestsh/session.sh
var sessionScript string

//go:embed guestsh/gui.sh
var guiBody string

// guiScript launches a program in a desktop session.
var guiScript = sessionScript + guiBody

// GUIResult says whether a launched GUI program still runs after 2 s.
type GUIResult struct {
	Running bool
	Exit    int
	Output  string // its first lines
}

// ExecGUI launches a program detached in user's desktop session, with the
// session's own DISPLAY, XAUTHORITY, WAYLAND_DISPLAY, DBUS address and
// locale.
func (v *VM) ExecGUI(ctx context.Context, command, user string) (GUIResult, error) {
	if user == "" {
		user = calls.DefaultString(calls.ExecGUI, "user")
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(command))
	res, err := v.execArgs(ctx, "/bin/sh", []string{"-c", guiScript, "poligon-gui", user, b64}, 30*time.Second, "vm_exec_gui")
	if err != nil {
		return GUIResult{}, err
	}
	if res.Exit != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = fmt.Sprintf("launching it failed (exit %d)", res.Exit)
		}
		return GUIResult{}, Failf("the desktop user must exist and be logged in (vm_login)", "%s", msg)
	}
	head, out, _ := strings.Cut(string(res.Stdout), "\n")
	r := GUIResult{Running: head == "running", Output: out}
	if code, ok := strings.CutPrefix(head, "exited "); ok {
		r.Exit, _ = strconv.Atoi(code)
	}
	return r, nil
}

func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "..."
}

// lastChars keeps the end of an output: where errors usually are.
func lastChars(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return "..." + string(b[len(b)-n:])
}
