package qemu

import (
	"context"
	"sync"
	"time"
)

// QEMU's QMP and guest agent sockets serve one client at a time: a second
// client waits until the first hangs up. So that several poligon processes
// (a server and a `poligon run`, or a restarted server) can share a VM, a
// connection is kept only while it is in use and for a moment after, to
// serve a burst of calls (an exec and its status polls) without redialling.
const connIdle = 2 * time.Second

// closer is a connection.
type closer interface{ Close() error }

// conns holds at most one connection per VM.
type conns[T closer] struct {
	dial func(ctx context.Context, vmid int) (T, error)

	mu sync.Mutex
	m  map[int]*conn[T]
}

type conn[T closer] struct {
	c     T
	users int
	timer *time.Timer
}

func newConns[T closer](dial func(ctx context.Context, vmid int) (T, error)) *conns[T] {
	return &conns[T]{dial: dial, m: map[int]*conn[T]{}}
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
	p.mu.Lock()
	if e, ok := p.m[vmid]; ok {
		e.users++
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	c, err := p.dial(ctx, vmid)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[vmid]; ok { // lost a race: use the one there
		c.Close()
		e.users++
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		return e, nil
	}
	e := &conn[T]{c: c, users: 1}
	p.m[vmid] = e
	return e, nil
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
	e.timer = time.AfterFunc(connIdle, func() {
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
