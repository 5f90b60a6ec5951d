package pvetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Privilege sets of PVE's built-in roles, for Grant.
var (
	// VMConfig is every VM.Config.* privilege.
	VMConfig = []string{"VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk",
		"VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options"}
	// GuestAgent is every VM.GuestAgent.* privilege (PVE 9; PVE 8 checks
	// VM.Monitor on the agent endpoints instead, and the server takes
	// either).
	GuestAgent = []string{"VM.GuestAgent.Audit", "VM.GuestAgent.FileRead", "VM.GuestAgent.FileSystemMgmt",
		"VM.GuestAgent.FileWrite", "VM.GuestAgent.Unrestricted"}
	// VMAdmin is PVEVMAdmin: everything on a VM (PVE 8's VM.Monitor and
	// PVE 9's VM.GuestAgent.* both).
	VMAdmin = append(append([]string{"VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Console", "VM.Migrate",
		"VM.Monitor", "VM.PowerMgmt", "VM.Snapshot", "VM.Snapshot.Rollback"}, VMConfig...), GuestAgent...)
	// TemplateUser is PVETemplateUser: see and clone.
	TemplateUser = []string{"VM.Audit", "VM.Clone"}
	// DatastoreUser is PVEDatastoreUser.
	DatastoreUser = []string{"Datastore.AllocateSpace", "Datastore.Audit"}
	// PoolAudit is PVEPoolAuditor: list the pool.
	PoolAudit = []string{"Pool.Audit"}
	// SDNUser is PVESDNUser: use a bridge (PVE 8.0 and later check it on
	// /sdn/zones/localnetwork/<bridge> when a VM is created or cloned).
	SDNUser = []string{"SDN.Audit", "SDN.Use"}
)

// Grant gives a token privileges on a path; they propagate to the paths
// below it (and a pool's privileges to its member VMs).
type Grant struct {
	Path  string
	Privs []string
}

type token struct {
	id     string // user@realm!tokenid
	secret string
	acl    map[string]map[string]bool // path -> privileges
}

// AddToken creates an API token with the given ACL and answers the full
// token value "USER@REALM!TOKENID=SECRET" as a client sends it.
func (s *Server) AddToken(tokenID string, grants ...Grant) string {
	if !strings.Contains(tokenID, "@") || !strings.Contains(tokenID, "!") {
		s.t.Fatalf("pvetest: token id %q is not USER@REALM!TOKENID", tokenID)
	}
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	secret := fmt.Sprintf("%x-%x-%x-%x-%x", buf[0:4], buf[4:6], buf[6:8], buf[8:10], buf[10:16])
	s.mu.Lock()
	defer s.mu.Unlock()
	tk := &token{id: tokenID, secret: secret, acl: map[string]map[string]bool{}}
	s.tokens[tokenID] = tk
	s.grantLocked(tk, grants)
	return tokenID + "=" + secret
}

// Grant adds privileges to an existing token.
func (s *Server) Grant(tokenID string, grants ...Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tk, ok := s.tokens[tokenID]
	if !ok {
		s.t.Fatalf("pvetest: no token %q", tokenID)
	}
	s.grantLocked(tk, grants)
}

// Revoke removes every privilege of a token on path.
func (s *Server) Revoke(tokenID, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tk, ok := s.tokens[tokenID]; ok {
		delete(tk.acl, path)
	}
}

func (s *Server) grantLocked(tk *token, grants []Grant) {
	for _, g := range grants {
		p := normPath(g.Path)
		if tk.acl[p] == nil {
			tk.acl[p] = map[string]bool{}
		}
		for _, priv := range g.Privs {
			tk.acl[p][priv] = true
		}
	}
}

func normPath(p string) string {
	p = "/" + strings.Trim(p, "/")
	return p
}

// authenticate checks the PVEAPIToken header (split on the last '=').
func (s *Server) authenticate(r *http.Request) (*token, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, fail(401, "No ticket")
	}
	v, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		return nil, fail(401, "authentication failure")
	}
	i := strings.LastIndex(v, "=")
	if i < 0 {
		return nil, fail(401, "invalid token value!")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tk, ok := s.tokens[v[:i]]
	if !ok || tk.secret != v[i+1:] {
		return nil, fail(401, "invalid token value!")
	}
	return tk, nil
}

// privs answers the privileges tk holds on path: its ACLs on the path and
// every ancestor, and for /vms/ID or /storage/ID those of the pools the VM
// or storage is a member of. s.mu is held.
func (s *Server) privs(tk *token, path string) map[string]bool {
	out := map[string]bool{}
	add := func(p string) {
		for q, set := range tk.acl {
			if q == "/" || q == p || strings.HasPrefix(p, q+"/") {
				for priv := range set {
					out[priv] = true
				}
			}
		}
	}
	add(path)
	if rest, ok := strings.CutPrefix(path, "/vms/"); ok {
		if id, err := strconv.Atoi(rest); err == nil {
			if v, ok := s.vms[id]; ok && v.pool != "" {
				add("/pool/" + v.pool)
			}
		}
	}
	if sid, ok := strings.CutPrefix(path, "/storage/"); ok {
		for id, p := range s.pools {
			if p.storages[sid] {
				add("/pool/" + id)
			}
		}
	}
	return out
}

func (s *Server) can(tk *token, path, priv string) bool { return s.privs(tk, path)[priv] }

// check fails with PVE's 403 unless tk holds priv on path. s.mu is held.
func (s *Server) check(tk *token, path, priv string) error {
	if s.can(tk, path, priv) {
		return nil
	}
	return fail(403, "Permission check failed (%s, %s)", path, priv)
}

// checkAny fails unless tk holds one of privs on path, with the bare
// message PVE gives for such checks. s.mu is held.
func (s *Server) checkAny(tk *token, path string, privs ...string) error {
	have := s.privs(tk, path)
	for _, p := range privs {
		if have[p] {
			return nil
		}
	}
	return fail(403, "Permission check failed")
}

func (s *Server) checkVM(tk *token, vmid int, priv string) error {
	return s.check(tk, fmt.Sprintf("/vms/%d", vmid), priv)
}

// permissions answers GET /access/permissions. Without a path PVE only
// evaluates the top-level paths, the token's ACL paths and the members of
// pools it has ACLs on; with a path, just that path.
func (s *Server) permissions(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	toMap := func(set map[string]bool) map[string]int {
		m := map[string]int{}
		for p := range set {
			m[p] = 1
		}
		return m
	}
	if p := c.str("path"); p != "" {
		return map[string]any{p: toMap(s.privs(c.tok, normPath(p)))}, nil
	}
	paths := map[string]bool{"/": true, "/access": true, "/nodes": true, "/pool": true, "/storage": true, "/vms": true}
	for p := range c.tok.acl {
		paths[p] = true
		if name, ok := strings.CutPrefix(p, "/pool/"); ok {
			for _, v := range s.vms {
				if v.pool == name {
					paths[fmt.Sprintf("/vms/%d", v.id)] = true
				}
			}
		}
	}
	out := map[string]any{}
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		out[p] = toMap(s.privs(c.tok, p))
	}
	return out, nil
}

func randomHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)
}
