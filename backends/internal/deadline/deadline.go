// Package deadline ties a connection's blocking I/O to a context: the one
// owner of the context.AfterFunc-plus-SetDeadline rule the protocol clients
// (QMP, qemu-ga, RFB) share.
package deadline

import (
	"context"
	"net"
	"sync"
	"time"
)

// Dir is which of a connection's directions a deadline binds.
type Dir int

const (
	Read Dir = 1 << iota
	Write
	Both = Read | Write
)

// Bind makes conn's I/O in dir end at ctx's deadline, or at once when ctx
// is cancelled, so a blocked read or write returns. Call unbind when that
// I/O is done: it clears the deadline (a cancellation after it cannot cut
// the next call's I/O) and answers whether ctx ended while bound.
func Bind(ctx context.Context, conn net.Conn, dir Dir) (unbind func() (ended bool)) {
	set := func(t time.Time) {
		switch dir {
		case Read:
			conn.SetReadDeadline(t)
		case Write:
			conn.SetWriteDeadline(t)
		default:
			conn.SetDeadline(t)
		}
	}
	until, _ := ctx.Deadline()
	set(until)
	var mu sync.Mutex
	done := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			set(time.Unix(1, 0)) // in the past: blocked I/O returns now
		}
	})
	return func() bool {
		cut := !stop()
		mu.Lock()
		done = true
		mu.Unlock()
		set(time.Time{})
		return cut || ctx.Err() != nil
	}
}
