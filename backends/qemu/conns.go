package qemu

import (
	"context"
	"sync"
	"time"
)

// QEMU's QMP and guest agent sockets serve one client at a time: a second
// client waits until the first hangs up. So that several poligon processes
// (a server and a `poligon run`, or a restarted server) can share a VM, a
// connection is kept only while it is in use and for its pool's idle time
// after. The monitor's is closed at once: it opens in a millisecond. The
// agent's is kept a moment, for the requests of one call (an exec and its
// status polls, at most 250 ms apart): a client that connects right after
// another hung up waits ~100 ms for qemu-ga's first answer (measured; 2-4 ms
// once it has had that long), while a connection kept longer makes the next
// poligon process wait for all of it.
const (
	agentIdle   = 300 * time.Millisecond
	monitorIdle = 0
)

// closer is a connection.
type closer interface{ Close() error }

// conns holds at most one connection per VM.
type conns[T closer] struct {
	dial func(ctx context.Context, vmid int) (T, error)
	idle time.Duration // how long an unused connection is kept

	mu      sync.Mutex
	m       map[int]*conn[T]
	dialing map[int]chan struct{} // one dial at a time per VM: a second would queue behind the first on QEMU's socket
}

type conn[T closer] struct {
	c     T
	users int
	timer *time.Timer
}

func newConns[T closer](dial func(ctx context.Context, vmid int) (T, error), idle time.Duration) *conns[T] {
	return &conns[T]{dial: dial, idle: idle, m: map[int]*conn[T]{}, dialing: map[int]chan struct{}{}}
}

// use runs fn with vmid's connection, dialling it when needed. When broken
// answers true for fn's error the connection is dropped, so the next use
// redials.
func (p *conns[T]) use(ctx context.Context, vmid int, fn func(T) error, broken func(error) bool) error {
	e, err := p.acquire(ctx, vmid)
	if err != nil {
		return err
	}
	err = fn(e.c)
	p.release(vmid, e, err != nil && broken(err))
	return err
}

func (p *conns[T]) acquire(ctx context.Context, vmid int) (*conn[T], error) {
	if e := p.reuse(vmid); e != nil {
		return e, nil
	}
	p.mu.Lock()
	sem, ok := p.dialing[vmid]
	if !ok {
		sem = make(chan struct{}, 1)
		p.dialing[vmid] = sem
	}
	p.mu.Unlock()
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-sem }()
	if e := p.reuse(vmid); e != nil { // dialled while this one waited
		return e, nil
	}
	c, err := p.dial(ctx, vmid)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := &conn[T]{c: c, users: 1}
	p.m[vmid] = e
	return e, nil
}

// reuse answers vmid's open connection, counted as used, or nil.
func (p *conns[T]) reuse(vmid int) *conn[T] {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[vmid]
	if !ok {
		return nil
	}
	e.users++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	return e
}

func (p *conns[T]) release(vmid int, e *conn[T], broken bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.users--
	if broken {
		if p.m[vmid] == e {
			delete(p.m, vmid)
		}
		if e.users == 0 {
			e.c.Close()
		}
		return
	}
	if e.users > 0 || p.m[vmid] != e {
		if e.users == 0 {
			e.c.Close() // dropped while in use
		}
		return
	}
	if p.idle <= 0 {
		delete(p.m, vmid)
		e.c.Close()
		return
	}
	e.timer = time.AfterFunc(p.idle, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.m[vmid] == e && e.users == 0 {
			delete(p.m, vmid)
			e.c.Close()
		}
	})
}

// drop closes vmid's connection (the VM stopped); a user still holding it
// closes it when done.
func (p *conns[T]) drop(vmid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[vmid]; ok {
		delete(p.m, vmid)
		if e.timer != nil {
			e.timer.Stop()
		}
		if e.users == 0 {
			e.c.Close()
		}
	}
}

// closeAll drops every connection.
func (p *conns[T]) closeAll() {
	p.mu.Lock()
	ids := make([]int, 0, len(p.m))
	for id := range p.m {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.drop(id)
	}
}
