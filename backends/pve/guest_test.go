package pve

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
)

// agentVM is a running VM whose agent is the real qemu-ga on this host
// (commands run here as the test user).
func agentVM(t testing.TB, opts pvetest.Options) (*cluster, *Backend, int) {
	t.Helper()
	opts.Agent = true
	c := newCluster(t, opts)
	b := c.backend(t, c.alice)
	vmid := cloneVM(t, b, "alice-repro-guest")
	startVM(t, b, vmid)
	return c, b, vmid
}

// run execs req and waits for it to exit.
func runIn(t *testing.T, b *Backend, vmid int, req backends.ExecRequest) backends.ExecStatus {
	t.Helper()
	st, err := b.run(testContext(t, 20*time.Second), vmid, req)
	if err != nil {
		t.Fatalf("exec %v: %v", req, err)
	}
	return st
}

func sh(script string, args ...string) backends.ExecRequest {
	return backends.ExecRequest{Path: "/bin/sh", Args: append([]string{"-c", script, "sh"}, args...)}
}

func TestExecOutputAndExitCode(t *testing.T) {
	_, b, vmid := agentVM(t, pvetest.Options{})
	st := runIn(t, b, vmid, sh(`echo out; echo err >&2; exit 3`))
	if !st.Exited || st.ExitCode != 3 || string(st.Stdout) != "out\n" || string(st.Stderr) != "err\n" {
		t.Fatalf("exec = %+v", st)
	}
	st = runIn(t, b, vmid, sh(`kill -TERM $$`))
	if !st.Exited || st.Signal != 15 {
		t.Errorf("a killed command = %+v; want signal 15", st)
	}
}

func TestExecNonASCIIAndBinary(t *testing.T) {
	_, b, vmid := agentVM(t, pvetest.Options{})
	// Cyrillic in the arguments and the output: the command travels as a
	// base64 script, the output comes back through PVE's latin-1 encoding.
	word := "привет, мир — é ✓"
	st := runIn(t, b, vmid, sh(`printf '%s|' "$1"; printf 'ошибка' >&2`, word))
	if string(st.Stdout) != word+"|" || string(st.Stderr) != "ошибка" {
		t.Fatalf("non-ASCII exec: stdout %q stderr %q", st.Stdout, st.Stderr)
	}
	// Every byte value through stdin and back.
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	st = runIn(t, b, vmid, backends.ExecRequest{Path: "cat", Input: all})
	if !bytes.Equal(st.Stdout, all) {
		t.Fatalf("binary stdin round trip: got %d bytes %q", len(st.Stdout), st.Stdout)
	}
	// An environment travels in the script too.
	st = runIn(t, b, vmid, backends.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `printf '%s' "$GREETING"`},
		Env: []string{"GREETING=it's ok"}})
	if string(st.Stdout) != "it's ok" {
		t.Errorf("exec with Env: stdout %q", st.Stdout)
	}
	_, err := b.ExecStart(testContext(t, 5*time.Second), vmid, backends.ExecRequest{Path: "cat", Input: make([]byte, 65<<10)})
	if err == nil || !strings.Contains(err.Error(), "input-data limit") {
		t.Errorf("input above 64 KiB = %v; want a refusal with a hint", err)
	}
}

// hostapi runs every command as /bin/sh -c "umask 022<newline>COMMAND" and
// leaves carrying its bytes to the backend: non-ASCII in such a script must
// reach the guest's shell intact (through PVE's mangling), with the umask.
func TestShellScriptWithNonASCIIReachesTheGuest(t *testing.T) {
	_, b, vmid := agentVM(t, pvetest.Options{})
	script := "umask 022\nprintf 'привет' | wc -c; printf 'ünïcödé\\n'; umask; printf '%s' \"it's\""
	st := runIn(t, b, vmid, backends.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}})
	if got := strings.Join(strings.Fields(string(st.Stdout)), " "); got != "12 ünïcödé 0022 it's" || st.ExitCode != 0 {
		t.Fatalf("the script answered %q (exit %d, stderr %q)", st.Stdout, st.ExitCode, st.Stderr)
	}
}

// agentCommand's encoding on its own: the command it makes is ASCII, and
// this host's /bin/sh runs it as the original would run.
func TestAgentCommandCarriesNonASCIIAsASCII(t *testing.T) {
	cases := []backends.ExecRequest{
		{Path: "/bin/sh", Args: []string{"-c", "umask 022\nprintf '%s|' \"$0\" 'ß' \"$1\"; umask", "né", "✓ x"}},
		{Path: "/bin/sh", Args: []string{"-c", "printf 'ascii only'"}},
		{Path: "/bin/sh", Args: []string{"-c", `printf '%s' "$V"`}, Env: []string{"V=ü'\"$x"}},
	}
	for _, req := range cases {
		args, err := agentCommand(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range args {
			if !isASCII(a) {
				t.Errorf("agentCommand(%q) = %q: not ASCII", req.Args, args)
			}
		}
		want := runHere(t, backends.ExecRequest{Path: req.Path, Args: req.Args, Env: req.Env})
		if got := runHere(t, backends.ExecRequest{Path: args[0], Args: args[1:]}); got != want {
			t.Errorf("agentCommand(%q) runs as %q; the original as %q", req.Args, got, want)
		}
	}
	if _, err := agentCommand(backends.ExecRequest{Path: "true", Env: []string{"1BAD=x"}}); err == nil {
		t.Error("agentCommand took a malformed environment name")
	}
}

func runHere(t *testing.T, req backends.ExecRequest) string {
	t.Helper()
	cmd := exec.Command(req.Path, req.Args...)
	cmd.Env = append(os.Environ(), req.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v: %s", req.Args, err, out)
	}
	return string(out)
}

func TestFileWriteReadRoundTrip(t *testing.T) {
	_, b, vmid := agentVM(t, pvetest.Options{})
	ctx := testContext(t, 60*time.Second)
	dir := t.TempDir()
	cases := map[string][]byte{
		"small.bin":   bytesUpTo(256),        // one file-write
		"empty.txt":   {},                    // one file-write
		"large.bin":   bytesUpTo(200 << 10),  // chunked through exec
		"файл ✓.txt":  []byte("кириллица\n"), // a non-ASCII path: exec both ways
		"exact45k.in": bytes.Repeat([]byte("x"), maxFileWriteRaw),
	}
	for name, data := range cases {
		path := filepath.Join(dir, name)
		if err := b.WriteFile(ctx, vmid, path, data); err != nil {
			t.Fatalf("WriteFile %s: %v", name, err)
		}
		if onDisk, err := os.ReadFile(path); err != nil || !bytes.Equal(onDisk, data) {
			t.Fatalf("%s on disk: %d bytes, %v; want %d", name, len(onDisk), err, len(data))
		}
		got, size, err := b.ReadFile(ctx, vmid, path, 0, 1<<30)
		if err != nil || !bytes.Equal(got, data) || size != int64(len(data)) {
			t.Fatalf("ReadFile %s: %d bytes, size %d, %v; want %d", name, len(got), size, err, len(data))
		}
	}
	// A window.
	got, size, err := b.ReadFile(ctx, vmid, filepath.Join(dir, "large.bin"), 1000, 24)
	if err != nil || !bytes.Equal(got, bytesUpTo(200 << 10)[1000:1024]) || size != 200<<10 {
		t.Fatalf("ReadFile window = %d bytes, size %d, %v", len(got), size, err)
	}
	if _, size, err := b.ReadFile(ctx, vmid, filepath.Join(dir, "large.bin"), 0, 0); err != nil || size != 200<<10 {
		t.Errorf("ReadFile size only = %d, %v", size, err)
	}
	if _, _, err := b.ReadFile(ctx, vmid, filepath.Join(dir, "missing"), 0, 10); err == nil {
		t.Error("ReadFile of a missing file succeeded")
	}
}

func bytesUpTo(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// Every agent call is one request: an agent down, still booting or busy
// is an error wrapping ErrAgentNotRunning at once (hostapi decides whether
// to wait), and a command is never sent twice.
func TestAgentCallsAreSentOnce(t *testing.T) {
	c, b, vmid := agentVM(t, pvetest.Options{})
	ctx := testContext(t, 20*time.Second)
	agent := "/nodes/pve1/qemu/" + strconv.Itoa(vmid) + "/agent/"
	c.srv.SetAgentDown(vmid, true)
	before := c.srv.Hits("POST", agent+"ping")
	err := b.GuestPing(ctx, vmid)
	if !errors.Is(err, backends.ErrAgentNotRunning) || errors.Is(err, backends.ErrNotRunning) ||
		!strings.Contains(err.Error(), "QEMU guest agent is not running") {
		t.Fatalf("GuestPing with the agent down = %v; want ErrAgentNotRunning with PVE's reason", err)
	}
	if n := c.srv.Hits("POST", agent+"ping") - before; n != 1 {
		t.Errorf("the ping was sent %d times; want once", n)
	}
	c.srv.SetAgentDown(vmid, false)

	c.srv.AgentBusy(1) // "got timeout": the agent may have queued the command
	before = c.srv.Hits("POST", agent+"exec")
	_, err = b.ExecStart(ctx, vmid, sh(`exit 0`))
	if !errors.Is(err, backends.ErrAgentNotRunning) || !strings.Contains(err.Error(), "got timeout") {
		t.Fatalf("ExecStart through a busy agent = %v; want ErrAgentNotRunning with PVE's reason", err)
	}
	if n := c.srv.Hits("POST", agent+"exec") - before; n != 1 {
		t.Errorf("the exec was sent %d times; want once", n)
	}
	c.srv.AgentBusy(1)
	if err := b.WriteFile(ctx, vmid, filepath.Join(t.TempDir(), "f"), []byte("x")); !errors.Is(err, backends.ErrAgentNotRunning) {
		t.Errorf("WriteFile through a busy agent = %v; want ErrAgentNotRunning", err)
	}

	// Waiting for a command polls its status through a busy agent, and
	// sends the command itself once.
	c.srv.InjectFault(pvetest.Fault{Path: agent + "exec-status", Status: 500, Times: 3,
		Message: "VM " + strconv.Itoa(vmid) + " qmp command 'guest-exec-status' failed - got timeout"})
	before = c.srv.Hits("POST", agent+"exec")
	polls := c.srv.Hits("GET", agent+"exec-status")
	st := runIn(t, b, vmid, sh(`echo once`))
	if string(st.Stdout) != "once\n" {
		t.Errorf("run through a busy exec-status = %+v", st)
	}
	if n := c.srv.Hits("POST", agent+"exec") - before; n != 1 {
		t.Errorf("run sent the command %d times; want once", n)
	}
	if n := c.srv.Hits("GET", agent+"exec-status") - polls; n < 4 {
		t.Errorf("run asked exec-status %d times; want the 3 busy answers and the exit", n)
	}
}

func TestAgentOfABootingGuest(t *testing.T) {
	_, b, vmid := agentVM(t, pvetest.Options{AgentBootDelay: time.Hour})
	err := b.GuestPing(testContext(t, 20*time.Second), vmid)
	if !errors.Is(err, backends.ErrAgentNotRunning) || errors.Is(err, backends.ErrNotRunning) {
		t.Fatalf("GuestPing while the guest boots = %v; want ErrAgentNotRunning only (waiting may help)", err)
	}
}

func TestAgentOfAStoppedVM(t *testing.T) {
	c := newCluster(t, pvetest.Options{Agent: true})
	b := c.backend(t, c.alice)
	vmid := cloneVM(t, b, "alice-repro-off")
	ctx := testContext(t, 20*time.Second)
	start := time.Now()
	err := b.GuestPing(ctx, vmid)
	if !errors.Is(err, backends.ErrNotRunning) || !errors.Is(err, backends.ErrAgentNotRunning) {
		t.Fatalf("GuestPing of a stopped VM = %v; want ErrNotRunning and ErrAgentNotRunning", err)
	}
	if ctx.Err() != nil {
		t.Errorf("GuestPing of a stopped VM waited for the deadline (%v)", time.Since(start))
	}
}

func TestInterfaces(t *testing.T) {
	_, b, vmid := agentVM(t, pvetest.Options{})
	ifaces, err := b.Interfaces(testContext(t, 10*time.Second), vmid)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifaces {
		if i.Name != "lo" {
			continue
		}
		for _, a := range i.Addresses {
			if a.String() == "127.0.0.1/8" {
				return
			}
		}
	}
	t.Fatalf("no lo with 127.0.0.1/8 among %+v", ifaces)
}

// BenchmarkExecRoundTrip is one short command through PVE's agent
// endpoints (exec, then exec-status until it exited) against the test
// server and the real qemu-ga.
func BenchmarkExecRoundTrip(b *testing.B) {
	_, be, vmid := agentVM(b, pvetest.Options{})
	ctx := testContext(b, time.Minute)
	b.ResetTimer()
	for b.Loop() {
		if st, err := be.run(ctx, vmid, backends.ExecRequest{Path: "true"}); err != nil || st.ExitCode != 0 {
			b.Fatal(st, err)
		}
	}
}
