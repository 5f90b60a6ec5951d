package pve

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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

func TestAgentNotRunningIsRetriedUntilTheDeadline(t *testing.T) {
	c, b, vmid := agentVM(t, pvetest.Options{})
	c.srv.SetAgentDown(vmid, true)
	before := c.srv.Hits("POST", "/nodes/pve1/qemu")
	err := b.GuestPing(testContext(t, 1500*time.Millisecond), vmid)
	if !errors.Is(err, backends.ErrAgentNotRunning) || !strings.Contains(err.Error(), "QEMU guest agent is not running") {
		t.Fatalf("GuestPing with the agent down = %v; want ErrAgentNotRunning with PVE's reason", err)
	}
	if n := c.srv.Hits("POST", "/nodes/pve1/qemu") - before; n < 2 {
		t.Errorf("the ping was tried %d times; want retries", n)
	}

	c.srv.SetAgentDown(vmid, false)
	c.srv.AgentBusy(2) // "got timeout" twice, then answers
	pid, err := b.ExecStart(testContext(t, 20*time.Second), vmid, sh(`exit 0`))
	if err != nil || pid <= 0 {
		t.Fatalf("ExecStart through a busy agent = %d, %v", pid, err)
	}
}

func TestAgentAnswersOnceBooted(t *testing.T) {
	_, b, vmid := agentVM(t, pvetest.Options{AgentBootDelay: 800 * time.Millisecond})
	// The agent boots a while after the start task ended: GuestPing waits.
	if err := b.GuestPing(testContext(t, 20*time.Second), vmid); err != nil {
		t.Fatalf("GuestPing while the guest boots: %v", err)
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
