package pve

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
)

// ErrNoPool is returned by Identity for a token that holds VM.Allocate on
// no pool.
var ErrNoPool = errors.New("token has no pool with VM.Allocate")

type identityAnswer struct {
	pools []string
	err   error // ErrNoPool, cached like an answer
}

// Identity answers the owner (from the token id) and the pools where the
// token holds VM.Allocate, cached 60 s per endpoint and token. A token
// with no such pool is refused with an error wrapping ErrNoPool.
//
// Candidate pools come from GET /pools (empty without Pool.Audit) and from
// the /pool/<name> paths of GET /access/permissions, which lists the paths
// the token has ACLs on; each candidate is then checked with
// ?path=/pool/<name>, since the unqualified answer does not evaluate
// every path.
func (b *Backend) Identity(ctx context.Context) (string, []string, error) {
	s := b.sess
	s.mu.Lock()
	if s.ident != nil && time.Since(s.identAt) < identityTTL {
		ans := s.ident
		s.mu.Unlock()
		return b.owner, append([]string(nil), ans.pools...), ans.err
	}
	s.mu.Unlock()

	pools, err := b.allocatablePools(ctx)
	if err != nil {
		return b.owner, nil, err // transient: not cached
	}
	ans := &identityAnswer{pools: pools}
	if len(pools) == 0 {
		ans.err = fmt.Errorf("pve: %w (grant %s VM.Allocate on /pool/<name>, e.g. the PVEVMAdmin role)", ErrNoPool, b.tokenID)
	}
	s.mu.Lock()
	s.ident, s.identAt = ans, time.Now()
	s.mu.Unlock()
	b.log.Debug("pve: identity", "owner", b.owner, "pools", pools)
	return b.owner, append([]string(nil), pools...), ans.err
}

func (b *Backend) allocatablePools(ctx context.Context) ([]string, error) {
	candidates := map[string]bool{}
	var listed []struct {
		PoolID string `json:"poolid"`
	}
	if err := b.get(ctx, "list pools", "/pools", nil, &listed); err != nil {
		return nil, err
	}
	for _, p := range listed {
		candidates[p.PoolID] = true
	}
	var perms map[string]map[string]flexInt
	if err := b.get(ctx, "read permissions", "/access/permissions", nil, &perms); err != nil {
		return nil, err
	}
	for path := range perms {
		if name, ok := strings.CutPrefix(path, "/pool/"); ok && name != "" && !strings.Contains(name, "/") {
			candidates[name] = true
		}
	}
	var pools []string
	for name := range candidates {
		path := "/pool/" + name
		var one map[string]map[string]flexInt
		if err := b.get(ctx, "read permissions on "+path, "/access/permissions", url.Values{"path": {path}}, &one); err != nil {
			return nil, err
		}
		if _, ok := one[path]["VM.Allocate"]; ok { // the value is the propagate flag; presence is the grant
			pools = append(pools, name)
		}
	}
	sort.Strings(pools)
	return pools, nil
}
