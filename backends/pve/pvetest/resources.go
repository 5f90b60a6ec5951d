package pvetest

import (
	"fmt"
	"sort"
	"strconv"
	"time"
)

// resourceVersion is what /cluster/resources shows of a VM from time at on;
// a nil row means the VM is gone. The list answers, for each VM, the last
// version older than the configured lag.
type resourceVersion struct {
	at   time.Time
	vmid int
	row  *resourceRow
}

type resourceRow struct {
	vmid     int
	node     string
	name     string
	status   string
	pool     string
	template bool
	lock     string
	unknown  bool
}

func (s *Server) rowLocked(v *vm) *resourceRow {
	return &resourceRow{vmid: v.id, node: v.node, name: v.name(), status: v.status(), pool: v.pool,
		template: v.template(), lock: v.lock, unknown: v.unknown}
}

// publishLocked records a VM's changed state for /cluster/resources.
func (s *Server) publishLocked(v *vm) {
	s.history = append(s.history, resourceVersion{at: time.Now(), vmid: v.id, row: s.rowLocked(v)})
}

func (s *Server) publishGoneLocked(vmid int) {
	s.history = append(s.history, resourceVersion{at: time.Now(), vmid: vmid})
}

// resources answers GET /cluster/resources: VM rows the token may audit
// now, as they were ResourceLag ago (name, status); the pool as it is now,
// only where the token has Pool.Audit on it.
func (s *Server) resources(c *call) (any, error) {
	typ := c.str("type")
	if typ != "" && typ != "vm" && typ != "node" && typ != "storage" && typ != "pool" && typ != "sdn" {
		return nil, paramError("type", "value '%s' does not have a value in the enumeration 'vm, storage, node, sdn, pool'", typ)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	if typ == "" || typ == "node" {
		for _, n := range s.opts.Nodes {
			out = append(out, map[string]any{"id": "node/" + n, "type": "node", "node": n, "status": "online"})
		}
	}
	if typ != "" && typ != "vm" {
		return out, nil
	}
	cutoff := time.Now().Add(-s.opts.ResourceLag)
	latest := map[int]*resourceRow{}
	seen := map[int]bool{}
	for _, ver := range s.history {
		if ver.at.After(cutoff) {
			continue
		}
		latest[ver.vmid] = ver.row
		seen[ver.vmid] = true
	}
	ids := make([]int, 0, len(latest))
	for id, row := range latest {
		if row != nil {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	for _, id := range ids {
		row := latest[id]
		path := fmt.Sprintf("/vms/%d", id)
		if !s.can(c.tok, path, "VM.Audit") {
			continue
		}
		r := map[string]any{"id": fmt.Sprintf("qemu/%d", id), "type": "qemu", "vmid": id, "node": row.node,
			"template": b2i(row.template), "maxmem": 2147483648, "maxcpu": 2, "maxdisk": 8589934592}
		if row.unknown {
			r["status"] = "unknown"
		} else {
			r["status"] = row.status
			r["name"] = row.name
		}
		// The pool comes from user.cfg, which is current; and PVE drops it
		// for a token without Pool.Audit on that pool (Cluster.pm).
		pool := row.pool
		if v, ok := s.vms[id]; ok {
			pool = v.pool
		}
		if pool != "" && s.can(c.tok, "/pool/"+pool, "Pool.Audit") {
			r["pool"] = pool
		}
		if row.lock != "" {
			r["lock"] = row.lock
		}
		out = append(out, r)
	}
	return out, nil
}

// nextID answers the lowest free vmid >= 100, as a string like PVE.
func (s *Server) nextID(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.has("vmid") {
		id, err := c.integer("vmid", 0)
		if err != nil {
			return nil, err
		}
		if _, taken := s.vms[id]; taken {
			return nil, paramError("vmid", "VM %d already exists", id)
		}
		return strconv.Itoa(id), nil
	}
	for id := 100; ; id++ {
		if _, taken := s.vms[id]; !taken {
			return strconv.Itoa(id), nil
		}
	}
}

// pools answers GET /pools: only pools with Pool.Audit are listed, but
// ?poolid=X answers X with all its members for anyone (PVE 8.1's Pool.pm
// calls its Pool.Audit check with noerr and ignores the answer). Before
// 8.1 (Options.NoPoolQuery) GET /pools takes no poolid.
func (s *Server) poolList(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	if c.has("poolid") && s.opts.NoPoolQuery {
		return nil, paramError("poolid", "property is not defined in schema and the schema does not allow additional properties")
	}
	if id := c.str("poolid"); id != "" {
		p, ok := s.pools[id]
		if !ok {
			return nil, fail(500, "pool '%s' does not exist", id)
		}
		return []map[string]any{{"poolid": p.id, "comment": p.comment, "members": s.membersLocked(p.id)}}, nil
	}
	ids := make([]string, 0, len(s.pools))
	for id := range s.pools {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if s.can(c.tok, "/pool/"+id, "Pool.Audit") {
			out = append(out, map[string]any{"poolid": id, "comment": s.pools[id].comment})
		}
	}
	return out, nil
}

// poolGet answers the deprecated GET /pools/{poolid} (403 without Pool.Audit).
func (s *Server) poolGet(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := c.vars["poolid"]
	if err := s.check(c.tok, "/pool/"+id, "Pool.Audit"); err != nil {
		return nil, err
	}
	p, ok := s.pools[id]
	if !ok {
		return nil, fail(500, "pool '%s' does not exist", id)
	}
	return map[string]any{"comment": p.comment, "members": s.membersLocked(id)}, nil
}

func (s *Server) membersLocked(poolid string) []map[string]any {
	members := []map[string]any{}
	ids := make([]int, 0)
	for id, v := range s.vms {
		if v.pool == poolid {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	for _, id := range ids { // not filtered by VM.Audit: PVE does not either
		v := s.vms[id]
		members = append(members, map[string]any{"id": fmt.Sprintf("qemu/%d", id), "type": "qemu", "vmid": id,
			"node": v.node, "name": v.name(), "status": v.status(), "template": b2i(v.template())})
	}
	return members
}

func (s *Server) nodeList(c *call) (any, error) {
	out := []map[string]any{}
	for _, n := range s.opts.Nodes {
		out = append(out, map[string]any{"node": n, "status": "online", "type": "node", "id": "node/" + n})
	}
	return out, nil
}

// nodeVMs answers GET /nodes/{node}/qemu, read from the configs (no lag).
func (s *Server) nodeVMs(c *call) (any, error) {
	node := c.vars["node"]
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.nodeExists(node); err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for id, v := range s.vms {
		if v.node != node || !s.can(c.tok, fmt.Sprintf("/vms/%d", id), "VM.Audit") {
			continue
		}
		row := map[string]any{"vmid": id, "name": v.name(), "status": v.status()}
		if v.template() {
			row["template"] = 1
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["vmid"].(int) < out[j]["vmid"].(int) })
	return out, nil
}

// storageList answers GET /nodes/{node}/storage[?content=X].
func (s *Server) storageList(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.nodeExists(c.vars["node"]); err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, st := range s.storages {
		if ct := c.str("content"); ct != "" && !s.storageHas(st.name, ct) {
			continue
		}
		if s.checkAny(c.tok, "/storage/"+st.name, "Datastore.AllocateSpace", "Datastore.Audit") != nil {
			continue // PVE lists only the storages the token may use or see
		}
		out = append(out, map[string]any{"storage": st.name, "type": st.typ, "content": st.content,
			"active": 1, "enabled": 1, "shared": 0})
	}
	return out, nil
}

// storageContent answers GET /nodes/{node}/storage/{storage}/content.
func (s *Server) storageContent(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.nodeExists(c.vars["node"]); err != nil {
		return nil, err
	}
	name := c.vars["storage"]
	if err := s.checkAny(c.tok, "/storage/"+name, "Datastore.AllocateSpace", "Datastore.Audit"); err != nil {
		return nil, err
	}
	for _, st := range s.storages {
		if st.name != name {
			continue
		}
		out := []map[string]any{}
		if ct := c.str("content"); ct == "" || ct == "iso" {
			for _, iso := range st.isos {
				out = append(out, map[string]any{"volid": iso.VolID, "format": "iso", "content": "iso",
					"size": iso.Size, "ctime": 1700000000})
			}
		}
		return out, nil
	}
	return nil, fail(500, "storage '%s' does not exist", name)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
