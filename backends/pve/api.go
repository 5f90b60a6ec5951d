package pve

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Thin helpers over go-proxmox's raw calls (which strip the {"data": ...}
// envelope): each names its operation in the error. Nothing is retried
// here: a retried clone or exec would run twice.

func (b *Backend) get(ctx context.Context, op, path string, query url.Values, out any) error {
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	return b.send(op, func() error { return b.api.Get(ctx, path, out) })
}

func (b *Backend) post(ctx context.Context, op, path string, body map[string]any, out any) error {
	var d any
	if len(body) > 0 {
		d = body
	}
	return b.send(op, func() error { return b.api.Post(ctx, path, d, out) })
}

func (b *Backend) put(ctx context.Context, op, path string, body map[string]any, out any) error {
	return b.send(op, func() error { return b.api.Put(ctx, path, body, out) })
}

func (b *Backend) del(ctx context.Context, op, path string, query url.Values, out any) error {
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	return b.send(op, func() error { return b.api.Delete(ctx, path, out) })
}

// send makes one request, unless PVE refused this token (401) less than
// refusedTTL ago: then the call fails at once with that refusal, instead
// of paying PVE's 3 s delay on every 401 again.
func (b *Backend) send(op string, request func() error) error {
	s := b.tok
	s.mu.Lock()
	r := s.refused
	s.mu.Unlock()
	if r != nil {
		if age := time.Since(r.at); age < refusedTTL {
			return fmt.Errorf("pve: %s: not sent: PVE refused token %s %s ago, and poligon sends it again only after %s: %w",
				op, b.tokenID, age.Round(time.Second), refusedTTL, r.err)
		}
	}
	err := b.wrap(op, request())
	if errors.Is(err, ErrUnauthenticated) {
		s.mu.Lock()
		s.refused = &refusal{at: time.Now(), err: err}
		s.mu.Unlock()
	} else if err == nil && r != nil {
		s.mu.Lock()
		s.refused = nil
		s.mu.Unlock()
	}
	return err
}

func vmPath(node string, vmid int) string {
	return fmt.Sprintf("/nodes/%s/qemu/%d", url.PathEscape(node), vmid)
}
