package hostapi

import (
	"context"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/redact"
)

// Credentials are what a caller brings to a bench: an owner the server has
// verified (from its config, or a bearer token the config knows) and a
// token for backends that verify callers themselves (a Proxmox API token).
type Credentials struct {
	Owner string // "" when only a backend token came
	Token redact.Secret
	// Remote: the call came over HTTP, so no token from the server's config
	// stands in for one the caller did not send.
	Remote bool
	// BenchKey is a physical bench's key (X-Bench-Key): it authorizes the
	// bench, not a person; a caller with the key alone is the key's
	// principal.
	BenchKey redact.Secret
}

// Bench is one configured place to run VMs, as a caller reaches it. The
// composition root (internal/app) makes one per [[bench]] of the config;
// hostapi and the engine see only this.
type Bench interface {
	// Open answers the backend that serves who, and the namespace of its VM
	// locks: the machines it reaches, so every caller of one machine queues
	// behind one lock.
	Open(ctx context.Context, who Credentials) (be backends.Backend, lockNS string, err error)
}

// Open binds a caller to a bench.
func Open(ctx context.Context, env *Env, b Bench, who Credentials) (*Caller, error) {
	be, ns, err := b.Open(ctx, who)
	if err != nil {
		return nil, err
	}
	return NewCaller(ctx, env, who.Owner, ns, be)
}
