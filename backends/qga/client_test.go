package qga

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
)

// A call that times out leaves its reply in the stream; the next call must
// discard it. The agent is frozen with SIGSTOP so the reply really comes late.
func TestStaleReplyIsDiscarded(t *testing.T) {
	a := startAgent(t)
	c := a.dial(t)
	ctx := testContext(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c.Exec(short, ExecRequest{Path: "/bin/true"})
	cancel()
	a.cmd.Process.Signal(syscall.SIGCONT)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNoAgent) {
		t.Fatalf("exec against a frozen agent: got %v, want ErrNoAgent and DeadlineExceeded", err)
	}

	// The late {"return":{"pid":N}} would decode into Info without complaint;
	// only a real guest-info reply carries a version.
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version == "" {
		t.Fatalf("Info got a stale reply: %+v", info)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// A half-sent command (a write cut off by a timeout) is reset by the sentinel.
func TestSyncResetsAHalfSentCommand(t *testing.T) {
	a := startAgent(t)
	c := a.dial(t)
	ctx := testContext(t)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.Write([]byte(`{"execute":"guest-exec","arguments":{"pa`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.Version == "" {
		t.Fatalf("after sync: %+v, %v", info, err)
	}
}

// The host end of a virtio-serial chardev accepts connections with no agent
// behind it: nothing ever answers.
func TestNoAgentAnswering(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "silent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // read everything, answer nothing
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()

	c, err := Dial(testContext(t), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = c.Ping(ctx)
	if !errors.Is(err, ErrNoAgent) || !errors.Is(err, backends.ErrAgentNotRunning) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ping with nobody answering: got %v", err)
	}

	// Cancellation (not only deadlines) ends a call too.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = c.Info(ctx)
	if !errors.Is(err, ErrNoAgent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled info with nobody answering: got %v", err)
	}
}

func TestUnknownCommandIsAnAgentError(t *testing.T) {
	c := startAgent(t).dial(t)
	err := c.Execute(testContext(t), "guest-no-such-command", nil, nil)
	var agentErr *Error
	if !errors.As(err, &agentErr) || agentErr.Class != "CommandNotFound" {
		t.Fatalf("got %v, want an *Error of class CommandNotFound", err)
	}
	if !strings.Contains(err.Error(), "guest-no-such-command") {
		t.Errorf("error does not name the command: %v", err)
	}
}

func TestCallsAfterCloseFail(t *testing.T) {
	c := startAgent(t).dial(t)
	ctx := testContext(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("ping after close: got %v, want ErrClosed", err)
	}
}

func BenchmarkPing(b *testing.B) {
	c := startAgent(b).dial(b)
	ctx := testContext(b)
	for b.Loop() {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// The real thing: QEMU's virtio-serial chardev for the agent, with no guest OS
// behind it. QEMU accepts the connection and takes the bytes; nothing answers.
func TestNoAgentBehindQEMUVirtioSerial(t *testing.T) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 not installed: skipping a test that needs a real QEMU")
	}
	sock := filepath.Join(shortTempDir(t), "qga.sock")
	qemu := exec.Command(bin, "-nodefaults", "-machine", "pc", "-accel", "tcg", "-m", "64", "-display", "none",
		"-device", "virtio-serial",
		"-chardev", "socket,path="+sock+",server=on,wait=off,id=qga0",
		"-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0")
	qemu.Stderr = &testLog{t: t}
	if err := qemu.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		qemu.Process.Kill()
		qemu.Wait()
	})

	ctx := testContext(t)
	var c *Client
	for c == nil {
		if c, err = Dial(ctx, sock); err != nil {
			select {
			case <-ctx.Done():
				t.Fatalf("QEMU's agent socket never accepted: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	defer c.Close()

	for range 2 { // and again: the stale state from the first try does not matter
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err = c.Ping(short)
		cancel()
		if !errors.Is(err, ErrNoAgent) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ping with no guest: got %v, want ErrNoAgent", err)
		}
	}
}
