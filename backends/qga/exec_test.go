package qga

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run starts a program and polls until it exits.
func run(t testing.TB, c *Client, req ExecRequest) ExecStatus {
	t.Helper()
	ctx := testContext(t)
	req.CaptureOutput = true
	pid, err := c.Exec(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.ExecStatus(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.Exited {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s %q did not exit", req.Path, req.Args)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func sh(script string, args ...string) ExecRequest {
	return ExecRequest{Path: "/bin/sh", Args: append([]string{"-c", script, "sh"}, args...)}
}

func TestExecOutputAndExitCode(t *testing.T) {
	c := startAgent(t).dial(t)
	st := run(t, c, sh(`printf 'to stdout'; printf 'to stderr' >&2; exit 7`))
	if string(st.Stdout) != "to stdout" || string(st.Stderr) != "to stderr" || st.ExitCode != 7 {
		t.Fatalf("got %+v", st)
	}
	if st.OutTruncated || st.ErrTruncated || st.Signal != 0 {
		t.Fatalf("unexpected flags: %+v", st)
	}
}

func TestExecKilledBySignal(t *testing.T) {
	c := startAgent(t).dial(t)
	st := run(t, c, sh(`kill -TERM $$`))
	if st.Signal != 15 {
		t.Fatalf("got %+v, want signal 15", st)
	}
}

func TestExecNonASCII(t *testing.T) {
	c := startAgent(t).dial(t)

	// UTF-8 arguments go through the JSON strings unchanged.
	word := "привет, мир ✓ ünïcödé"
	st := run(t, c, sh(`printf '%s' "$1"`, word))
	if string(st.Stdout) != word {
		t.Fatalf("stdout %q, want %q", st.Stdout, word)
	}

	// Bytes that are not UTF-8 come back exactly (the output is base64).
	st = run(t, c, sh(`printf '\377\000\201\n\351t\351'`))
	if want := []byte{0xff, 0x00, 0x81, '\n', 0xe9, 't', 0xe9}; !bytes.Equal(st.Stdout, want) {
		t.Fatalf("stdout % x, want % x", st.Stdout, want)
	}

	// Binary stdin goes in as base64 too.
	input := []byte{0, 1, 2, 0xfe, 0xff, '\n', 0xc3}
	req := ExecRequest{Path: "/bin/cat", Input: input}
	if st = run(t, c, req); !bytes.Equal(st.Stdout, input) {
		t.Fatalf("cat of binary input: % x, want % x", st.Stdout, input)
	}
}

func TestExecRefusesArgumentsThatAreNotUTF8(t *testing.T) {
	c := startAgent(t).dial(t)
	_, err := c.Exec(testContext(t), sh("echo", "\xff\xfe"))
	if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Fatalf("got %v, want a UTF-8 error", err)
	}
}

func TestExecLargeOutput(t *testing.T) {
	a := startAgent(t)
	c := a.dial(t)
	data := make([]byte, 1<<20)
	rand.Read(data)
	path := filepath.Join(a.dir, "big.bin")
	if err := c.WriteFile(testContext(t), path, data); err != nil {
		t.Fatal(err)
	}
	st := run(t, c, ExecRequest{Path: "/bin/cat", Args: []string{path}})
	if st.OutTruncated || !bytes.Equal(st.Stdout, data) {
		t.Fatalf("got %d bytes (truncated %v), want the 1 MiB file", len(st.Stdout), st.OutTruncated)
	}
}

// qemu-ga keeps at most 16 MiB of a program's output.
func TestExecOutputLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 16 MiB through the agent")
	}
	c := startAgent(t).dial(t)
	st := run(t, c, sh(`head -c 16777217 /dev/zero`))
	if !st.OutTruncated || len(st.Stdout) != 16<<20 {
		t.Fatalf("got %d bytes, truncated %v; want 16 MiB, truncated", len(st.Stdout), st.OutTruncated)
	}
}

func TestExecStatusOfUnknownPID(t *testing.T) {
	c := startAgent(t).dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var agentErr *Error
	if _, err := c.ExecStatus(ctx, 999999999); err == nil || !errors.As(err, &agentErr) {
		t.Fatalf("got %v, want an agent error", err)
	}
}

func BenchmarkExecRoundTrip(b *testing.B) {
	c := startAgent(b).dial(b)
	for b.Loop() {
		run(b, c, ExecRequest{Path: "/bin/true"})
	}
}
