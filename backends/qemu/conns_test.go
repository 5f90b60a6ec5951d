package qemu

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

type fakeConn struct{ closed atomic.Bool }

func (c *fakeConn) Close() error { c.closed.Store(true); return nil }

// Two users of one VM at once dial once (a second dial would queue behind
// the first on QEMU's one-client socket), and a pool without an idle time
// closes the connection as its last user lets go.
func TestConnsDialOncePerVM(t *testing.T) {
	var dials atomic.Int32
	gate := make(chan struct{})
	p := newConns(func(ctx context.Context, vmid int) (*fakeConn, error) {
		dials.Add(1)
		<-gate
		return &fakeConn{}, nil
	}, 0)
	var wg sync.WaitGroup
	got, both := make(chan *fakeConn, 2), make(chan struct{})
	for range 2 {
		wg.Go(func() {
			p.use(context.Background(), 7, func(c *fakeConn) error {
				got <- c
				<-both // both hold a connection at once
				return nil
			}, func(error) bool { return false })
		})
	}
	close(gate)
	a, b := <-got, <-got
	close(both)
	wg.Wait()
	if dials.Load() != 1 || a != b {
		t.Fatalf("%d dials, one connection: %v", dials.Load(), a == b)
	}
	if !a.closed.Load() {
		t.Fatal("a pool without an idle time kept the connection after its last use")
	}
	p.use(context.Background(), 7, func(*fakeConn) error { return nil }, func(error) bool { return false })
	if dials.Load() != 2 {
		t.Fatalf("the next use dialled %d times in all, want 2", dials.Load())
	}
}
