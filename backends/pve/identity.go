package pve

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
)

// ErrNoPool is returned by Identity for a token that holds VM.Allocate on
// no pool.
var ErrNoPool = errors.New("token has no pool with VM.Allocate")

type identityAnswer struct {
	pools   []string
	audited map[string]bool // pools the token also holds Pool.Audit on
	err     error           // ErrNoPool, cached like an answer
}

// Identity answers the owner (from the token id) and the pools where the
// token holds VM.Allocate, cached 60 s per token. A token with no such pool
// is refused with an error wrapping ErrNoPool.
//
// Candidate pools come from GET /pools (empty without Pool.Audit) and from
// the /pool/<name> paths of GET /access/permissions, which lists the paths
// the token has ACLs on; each candidate is then checked with
// ?path=/pool/<name>, since the unqualified answer does not evaluate
// every path.
func (b *Backend) Identity(ctx context.Context) (string, []string, error) {
	ans, err := b.identity(ctx)
	if err != nil {
		return b.owner, nil, err
	}
	return b.owner, append([]string(nil), ans.pools...), ans.err
}

// identity answers the cached identity, reading it when stale; the error
// is for a failure to ask (not cached), ans.err for a token with no pool.
func (b *Backend) identity(ctx context.Context) (*identityAnswer, error) {
	s := b.tok
	s.mu.Lock()
	if s.ident != nil && time.Since(s.identAt) < identityTTL {
		ans := s.ident
		s.mu.Unlock()
		return ans, nil
	}
	s.mu.Unlock()

	pools, audited, err := b.allocatablePools(ctx)
	if err != nil {
		return nil, err // transient: not cached
	}
	ans := &identityAnswer{pools: pools, audited: audited}
	if len(pools) == 0 {
		ans.err = backends.WithHint(fmt.Errorf("pve: %w (grant %s VM.Allocate on /pool/<name>, e.g. the PVEVMAdmin role)", ErrNoPool, b.tokenID), hintNoPool)
	}
	s.mu.Lock()
	s.ident, s.identAt = ans, time.Now()
	s.mu.Unlock()
	b.log.DebugContext(ctx, "pve: identity", "owner", b.owner, "pools", pools)
	return ans, nil
}

func (b *Backend) allocatablePools(ctx context.Context) ([]string, map[string]bool, error) {
	candidates := map[string]bool{}
	var listed []struct {
		PoolID string `json:"poolid"`
	}
	if err := b.get(ctx, "list pools", "/pools", nil, &listed); err != nil {
		return nil, nil, err
	}
	for _, p := range listed {
		candidates[p.PoolID] = true
	}
	var perms map[string]map[string]flexInt
	if err := b.get(ctx, "read permissions", "/access/permissions", nil, &perms); err != nil {
		return nil, nil, err
	}
	for path := range perms {
		if name, ok := strings.CutPrefix(path, "/pool/"); ok && name != "" && !strings.Contains(name, "/") {
			candidates[name] = true
		}
	}
	var pools []string
	audited := map[string]bool{}
	for name := range candidates {
		path := "/pool/" + name
		var one map[string]map[string]flexInt
		if err := b.get(ctx, "read permissions on "+path, "/access/permissions", url.Values{"path": {path}}, &one); err != nil {
			return nil, nil, err
		}
		if _, ok := one[path]["VM.Allocate"]; ok { // the value is the propagate flag; presence is the grant
			pools = append(pools, name)
			_, audited[name] = one[path]["Pool.Audit"]
		}
	}
	sort.Strings(pools)
	return pools, audited, nil
}
