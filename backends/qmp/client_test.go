package qmp

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDialNegotiatesAndQueriesStatus(t *testing.T) {
	c := startQEMU(t).dial(t)
	st, err := c.QueryStatus(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "running" || !st.Running {
		t.Fatalf("status %+v, want running", st)
	}
}

func TestUnknownCommandIsAQMPError(t *testing.T) {
	c := startQEMU(t).dial(t)
	ctx := testContext(t)
	err := c.Execute(ctx, "no-such-command", nil, nil)
	if errorClass(err) != "CommandNotFound" {
		t.Fatalf("got %v, want an *Error of class CommandNotFound", err)
	}
	if !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("error does not name the command: %v", err)
	}
	// A bad argument is another class; the connection stays usable.
	err = c.Execute(ctx, "query-status", map[string]int{"bogus": 1}, nil)
	if errorClass(err) != "GenericError" {
		t.Fatalf("got %v, want a GenericError", err)
	}
	if _, err := c.QueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
}

// A ctx ending mid-command closes the connection; a new one works. QEMU is
// frozen with SIGSTOP so the reply really does not come in time.
func TestContextEndingMidCommandClosesTheConnection(t *testing.T) {
	vm := startQEMU(t)
	c := vm.dial(t)
	if err := vm.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.QueryStatus(ctx)
	cancel()
	vm.cmd.Process.Signal(syscall.SIGCONT)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrClosed) {
		t.Fatalf("query-status against a frozen QEMU: got %v, want DeadlineExceeded and ErrClosed", err)
	}
	if _, err := c.QueryStatus(testContext(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("next command: got %v, want ErrClosed", err)
	}

	c = vm.dial(t)
	if _, err := c.QueryStatus(testContext(t)); err != nil {
		t.Fatalf("after redial: %v", err)
	}
}

func TestDialRefusesWhatIsNotQMP(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "x.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		conn.Write([]byte(`{"hello": "world"}` + "\n"))
		conn, err = ln.Accept() // the second says nothing at all
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Read(make([]byte, 1))
	}()

	if _, err := Dial(testContext(t), sock); err == nil || !strings.Contains(err.Error(), "not a QMP socket") {
		t.Fatalf("peer with another greeting: got %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, sock); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent peer: got %v, want DeadlineExceeded", err)
	}
}

func TestQuit(t *testing.T) {
	vm := startQEMU(t)
	c := vm.dial(t)
	ctx := testContext(t)
	since := time.Now()
	if err := c.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-vm.exited:
	case <-ctx.Done():
		t.Fatal("QEMU still runs after quit")
	}
	if _, err := c.QueryStatus(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("command after quit: got %v, want ErrClosed", err)
	}
	// Events that came before the end are still there.
	if _, err := c.WaitEvent(ctx, "SHUTDOWN", since); err != nil {
		t.Fatalf("SHUTDOWN event: %v", err)
	}
	if _, err := c.WaitEvent(ctx, "RESUME", since); !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting on a closed connection: got %v, want ErrClosed", err)
	}
}

func BenchmarkQueryStatus(b *testing.B) {
	c := startQEMU(b).dial(b)
	ctx := testContext(b)
	for b.Loop() {
		if _, err := c.QueryStatus(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
