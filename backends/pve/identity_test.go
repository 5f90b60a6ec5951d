package pve

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/pve/pvetest"
)

func TestIdentityPoolsFromPermissions(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	c.srv.AddPool("carol")
	c.srv.AddPool("dave")
	vmAdmin := pvetest.Grant{Path: "/pool/carol", Privs: pvetest.VMAdmin} // no Pool.Audit
	carol := c.srv.AddToken("Carol.Smith@ad!ci", vmAdmin)
	dave := c.srv.AddToken("dave@pve!t",
		pvetest.Grant{Path: "/pool/alice", Privs: pvetest.PoolAudit}, // sees alice's pool, may not allocate in it
		pvetest.Grant{Path: "/pool/dave", Privs: append(pvetest.VMAdmin, pvetest.PoolAudit...)})
	bob := c.srv.AddToken("bob@pve!none")

	cases := []struct {
		token, owner string
		pools        []string
	}{
		{c.alice, "alice", []string{"alice"}},
		{carol, "carolsmith", []string{"carol"}},
		{dave, "dave", []string{"dave"}},
	}
	for _, tc := range cases {
		b := c.backend(t, tc.token)
		owner, pools, err := b.Identity(testContext(t, 10*time.Second))
		if err != nil || owner != tc.owner || !reflect.DeepEqual(pools, tc.pools) {
			t.Errorf("Identity(%s) = %q %v %v; want %q %v", b.TokenID(), owner, pools, err, tc.owner, tc.pools)
		}
	}

	// carol's /pools is empty (no Pool.Audit): the pool came from her ACL paths.
	var listed []map[string]any
	if err := c.backend(t, carol).get(testContext(t, 5*time.Second), "list pools", "/pools", nil, &listed); err != nil || len(listed) != 0 {
		t.Errorf("carol's GET /pools = %v, %v; want an empty list", listed, err)
	}

	owner, pools, err := c.backend(t, bob).Identity(testContext(t, 10*time.Second))
	if !errors.Is(err, ErrNoPool) || !strings.Contains(err.Error(), "token has no pool with VM.Allocate") || owner != "bob" || pools != nil {
		t.Errorf("Identity(bob) = %q %v %v; want ErrNoPool", owner, pools, err)
	}
}

func TestIdentityIsCachedPerEndpointAndToken(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	ctx := testContext(t, 10*time.Second)
	if _, _, err := c.backend(t, c.alice).Identity(ctx); err != nil {
		t.Fatal(err)
	}
	asked := c.srv.Hits("GET", "/access/permissions")
	if asked == 0 {
		t.Fatal("Identity did not read /access/permissions")
	}
	// A second Backend of the same endpoint and token (hostapi makes one
	// per request) answers from the cache, even after the grant is gone.
	c.srv.Revoke(aliceTokenID, "/pool/alice")
	_, pools, err := c.backend(t, c.alice).Identity(ctx)
	if err != nil || !reflect.DeepEqual(pools, []string{"alice"}) {
		t.Errorf("cached Identity = %v, %v", pools, err)
	}
	if n := c.srv.Hits("GET", "/access/permissions"); n != asked {
		t.Errorf("the cached Identity asked PVE again (%d -> %d permission reads)", asked, n)
	}

	// The same token id with a wrong secret is another token: PVE refuses it.
	wrong := aliceTokenID + "=00000000-0000-0000-0000-000000000000"
	_, _, err = c.backend(t, wrong).Identity(ctx)
	if !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Identity with a wrong secret = %v; want ErrUnauthenticated", err)
	}

	// Another bench (its own Cluster) of the same PVE shares nothing with
	// this one: it asks again.
	_, pools, err = c.backend(t, c.alice, func(cfg *Config) { cfg.BackendID = "alias-" + t.Name(); cfg.Cluster = NewCluster() }).Identity(ctx)
	if !errors.Is(err, ErrNoPool) || pools != nil {
		t.Errorf("Identity through another endpoint key after the revoke = %v, %v; want ErrNoPool", pools, err)
	}
}

func TestAliasesWithOneBackendIDShareCaches(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	ctx := testContext(t, 10*time.Second)
	id := "lab-" + strings.ToLower(t.Name())
	shared := NewCluster() // two aliases of one cluster given one Cluster
	byIP := c.backend(t, c.alice, func(cfg *Config) { cfg.BackendID = id; cfg.Cluster = shared })
	byName := c.backend(t, c.alice, func(cfg *Config) {
		cfg.BackendID = id
		cfg.Cluster = shared
		cfg.URL = strings.Replace(c.srv.URL, "127.0.0.1", "localhost", 1)
	})
	if byIP.LockKey() != byName.LockKey() || byIP.LockKey() != "pve:"+id {
		t.Errorf("lock keys %q and %q", byIP.LockKey(), byName.LockKey())
	}
	if _, _, err := byIP.Identity(ctx); err != nil {
		t.Fatal(err)
	}
	asked := c.srv.Hits("GET", "/access/permissions")
	if _, pools, err := byName.Identity(ctx); err != nil || len(pools) != 1 {
		t.Fatalf("Identity through the other alias = %v, %v", pools, err)
	}
	if n := c.srv.Hits("GET", "/access/permissions"); n != asked {
		t.Errorf("the alias asked PVE again (%d -> %d permission reads)", asked, n)
	}
	if _, err := byName.VMs(ctx); err != nil { // the alias works on its own too
		t.Fatal(err)
	}
}
