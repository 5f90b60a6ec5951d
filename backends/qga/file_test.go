package qga

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReadFileRoundTrip(t *testing.T) {
	a := startAgent(t)
	c := a.dial(t)
	ctx := testContext(t)
	data := make([]byte, 1<<20+12345) // more than one chunk each way
	rand.Read(data)
	path := filepath.Join(a.dir, "round.bin")

	if err := c.WriteFile(ctx, path, data); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(onDisk, data) {
		t.Fatalf("file on disk differs (%d bytes, %v)", len(onDisk), err)
	}

	got, size, err := c.ReadFile(ctx, path, 0, int64(len(data))+100)
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(data)) || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, size %d; want the %d bytes written", len(got), size, len(data))
	}

	// Writing again truncates.
	if err := c.WriteFile(ctx, path, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if got, size, err = c.ReadFile(ctx, path, 0, 100); err != nil || string(got) != "short" || size != 5 {
		t.Fatalf("after rewrite: %q, size %d, %v", got, size, err)
	}
}

func TestReadFileWindow(t *testing.T) {
	a := startAgent(t)
	c := a.dial(t)
	ctx := testContext(t)
	data := make([]byte, 100000)
	rand.Read(data)
	path := filepath.Join(a.dir, "window.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		offset, limit int64
		want          []byte
	}{
		{1000, 5000, data[1000:6000]},
		{99990, 5000, data[99990:]},
		{200000, 10, nil},
		{0, 0, nil}, // the size alone
	} {
		got, size, err := c.ReadFile(ctx, path, tc.offset, tc.limit)
		if err != nil {
			t.Fatalf("offset %d limit %d: %v", tc.offset, tc.limit, err)
		}
		if size != int64(len(data)) || !bytes.Equal(got, tc.want) {
			t.Errorf("offset %d limit %d: got %d bytes, size %d; want %d bytes, size %d",
				tc.offset, tc.limit, len(got), size, len(tc.want), len(data))
		}
	}
}

// /proc files report no size when seeked; the read tells it instead.
func TestReadFileOfUnknownSize(t *testing.T) {
	c := startAgent(t).dial(t)
	got, size, err := c.ReadFile(testContext(t), "/proc/self/status", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got, []byte("qemu-ga")) || size != int64(len(got)) {
		t.Fatalf("got %d bytes, size %d: %.80q", len(got), size, got)
	}
}

func TestReadFileMissing(t *testing.T) {
	a := startAgent(t)
	c := a.dial(t)
	_, _, err := c.ReadFile(testContext(t), filepath.Join(a.dir, "missing"), 0, 10)
	var agentErr *Error
	if !errors.As(err, &agentErr) {
		t.Fatalf("got %v, want an agent error", err)
	}
}

// A handle whose close could not be sent (its ctx had ended) is closed before
// the next command.
func TestHandleLeftOpenIsClosedLater(t *testing.T) {
	a := startAgent(t)
	c := a.dial(t)
	ctx := testContext(t)
	path := filepath.Join(a.dir, "f")
	os.WriteFile(path, []byte("x"), 0o600)
	handle, err := c.FileOpen(ctx, path, "r")
	if err != nil {
		t.Fatal(err)
	}

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.closeHandle(ended, handle); !errors.Is(err, context.Canceled) {
		t.Fatalf("close with an ended ctx: %v", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	var agentErr *Error
	if _, _, err := c.FileRead(ctx, handle, 1); !errors.As(err, &agentErr) {
		t.Fatalf("reading the handle after the queued close: %v, want an agent error (no such handle)", err)
	}
}

func BenchmarkReadFile1MiB(b *testing.B) {
	a := startAgent(b)
	c := a.dial(b)
	path := filepath.Join(a.dir, "bench.bin")
	os.WriteFile(path, make([]byte, 1<<20), 0o600)
	ctx := testContext(b)
	b.SetBytes(1 << 20)
	for b.Loop() {
		if _, _, err := c.ReadFile(ctx, path, 0, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteFile1MiB(b *testing.B) {
	a := startAgent(b)
	c := a.dial(b)
	path := filepath.Join(a.dir, "bench.bin")
	data := make([]byte, 1<<20)
	ctx := testContext(b)
	b.SetBytes(1 << 20)
	for b.Loop() {
		if err := c.WriteFile(ctx, path, data); err != nil {
			b.Fatal(err)
		}
	}
}
