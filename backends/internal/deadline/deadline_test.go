package deadline

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// A read blocked on a connection returns when its context is cancelled;
// once unbound, a cancellation no longer touches the connection.
func TestBindCutsABlockedRead(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	unbind := Bind(ctx, a, Read)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err := a.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) || !unbind() {
		t.Fatalf("a read under a cancelled context: %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	unbind = Bind(ctx, a, Both)
	if unbind() {
		t.Fatal("unbound before its context ended, it says the context ended")
	}
	cancel()
	go b.Write([]byte{1})
	if _, err := a.Read(make([]byte, 1)); err != nil {
		t.Fatalf("a read after unbind, its context cancelled: %v", err)
	}
}
