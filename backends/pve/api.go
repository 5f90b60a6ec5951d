package pve

import (
	"context"
	"fmt"
	"net/url"
)

// Thin helpers over go-proxmox's raw calls (which strip the {"data": ...}
// envelope): each names its operation in the error. POSTs are never
// retried here: a retried clone or exec would run twice.

func (b *Backend) get(ctx context.Context, op, path string, query url.Values, out any) error {
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	return b.wrap(op, b.api.Get(ctx, path, out))
}

func (b *Backend) post(ctx context.Context, op, path string, body map[string]any, out any) error {
	var d any
	if len(body) > 0 {
		d = body
	}
	return b.wrap(op, b.api.Post(ctx, path, d, out))
}

func (b *Backend) put(ctx context.Context, op, path string, body map[string]any, out any) error {
	return b.wrap(op, b.api.Put(ctx, path, body, out))
}

func (b *Backend) del(ctx context.Context, op, path string, query url.Values, out any) error {
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	return b.wrap(op, b.api.Delete(ctx, path, out))
}

func vmPath(node string, vmid int) string {
	return fmt.Sprintf("/nodes/%s/qemu/%d", url.PathEscape(node), vmid)
}
