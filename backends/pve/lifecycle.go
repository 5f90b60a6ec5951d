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

// shutdownTimeout is how long Stop lets the guest shut down (ACPI, or the
// guest agent when the VM's agent option is on: PVE's choice) before PVE
// pulls the plug; both happen inside one qmshutdown task (forceStop=1).
const shutdownTimeout = 60

// hiddenTemplateMark hides a template from Templates.
const hiddenTemplateMark = "not-for-clone"

// resourceRow is a VM row of /cluster/resources. Rows lag mutations, and
// status may be "unknown" with no name when PVE lacks RRD data.
type resourceRow struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	VMID     flexInt  `json:"vmid"`
	Node     string   `json:"node"`
	Name     string   `json:"name"`
	Status   string   `json:"status"`
	Template flexBool `json:"template"`
	Pool     string   `json:"pool"`
	Lock     string   `json:"lock"`
}

// rows answers the qemu rows of /cluster/resources, cached 10 s per token
// and re-read after any mutation (or when fresh).
func (b *Backend) rows(ctx context.Context, fresh bool) ([]resourceRow, error) {
	if rows, ok := b.cachedRows(); ok && !fresh {
		return rows, nil
	}
	s := b.tok
	gen := b.cl.generation()
	var all []resourceRow
	if err := b.get(ctx, "list VMs", "/cluster/resources", url.Values{"type": {"vm"}}, &all); err != nil {
		return nil, err
	}
	rows := make([]resourceRow, 0, len(all))
	for _, r := range all {
		if r.Type != "qemu" || r.VMID <= 0 {
			continue // containers, and anything without a vmid
		}
		rows = append(rows, r)
		if r.Node != "" {
			b.cl.learnNode(int(r.VMID), r.Node)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].VMID < rows[j].VMID })
	s.mu.Lock()
	s.rows, s.rowsGen, s.rowsAt = rows, gen, time.Now()
	s.mu.Unlock()
	return rows, nil
}

// cachedRows answers the cached rows while they are fresh.
func (b *Backend) cachedRows() ([]resourceRow, bool) {
	s := b.tok
	gen := b.cl.generation()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows != nil && s.rowsGen == gen && time.Since(s.rowsAt) < vmListTTL {
		return s.rows, true
	}
	return nil, false
}

// Templates lists the clonable templates; names containing
// "not-for-clone" are hidden.
func (b *Backend) Templates(ctx context.Context) ([]backends.Template, error) {
	rows, err := b.rows(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []backends.Template
	for _, r := range rows {
		if bool(r.Template) && !strings.Contains(strings.ToLower(r.Name), hiddenTemplateMark) {
			out = append(out, backends.Template{VMID: int(r.VMID), Name: r.Name, Node: r.Node})
		}
	}
	return out, nil
}

// VMs lists the VMs (templates excluded) from /cluster/resources, which
// may lag a mutation by up to a minute on PVE's side, plus our 10 s cache:
// the cache is skipped while a VM this token created is missing from it,
// so a new VM is listed as soon as PVE lists it. Each VM's Pool comes from
// its row (shown only with Pool.Audit), else from what this token created,
// else from the members of the token's pools (see poolOf). A row PVE
// locks for a clone in progress has status "cloning".
func (b *Backend) VMs(ctx context.Context) ([]backends.VM, error) {
	rows, cached := b.cachedRows()
	if !cached || b.lacksCreated(ctx, rows) {
		var err error
		if rows, err = b.rows(ctx, true); err != nil {
			return nil, err
		}
	}
	var out []backends.VM
	for _, r := range rows {
		if r.Template {
			continue
		}
		status := r.Status
		lock := r.Lock
		if c, ok := b.tok.createdRecord(int(r.VMID)); ok && !c.ended.IsZero() {
			lock = "" // the row lags the end of our own task
		}
		switch {
		case lock == "clone": // its copy runs: not "stopped", and not usable yet
			status = "cloning"
		case status == "":
			status = "unknown"
		}
		out = append(out, backends.VM{VMID: int(r.VMID), Name: r.Name, Node: r.Node, Status: status, Pool: r.Pool})
	}
	for i := range out {
		if out[i].Pool == "" {
			out[i].Pool = b.poolOf(ctx, out[i].VMID, out[i].Name, true)
		}
	}
	return out, nil
}

// lacksCreated says whether rows lack a VM this token created: a record
// whose task ended well, or which is too old to still be cloning unseen,
// is settled first by asking its task once.
func (b *Backend) lacksCreated(ctx context.Context, rows []resourceRow) bool {
	listed := make(map[int]bool, len(rows))
	for _, r := range rows {
		listed[int(r.VMID)] = true
	}
	lacks := false
	for _, id := range b.tok.createdIDs() {
		if listed[id] {
			continue
		}
		if c, ok := b.tok.createdRecord(id); ok && c.ended.IsZero() && time.Since(c.at) > createdTTL {
			_, _ = b.TaskStatus(ctx, c.upid) // a failed task drops the record
		}
		if _, ok := b.tok.createdRecord(id); ok {
			lacks = true
		}
	}
	return lacks
}

// vmStatus is GET .../status/current.
type vmStatus struct {
	Status    string   `json:"status"`
	QMPStatus string   `json:"qmpstatus"`
	Name      string   `json:"name"`
	Template  flexBool `json:"template"`
	Lock      string   `json:"lock"`
}

func (st vmStatus) state() string {
	switch {
	case st.Status == "running" && (st.QMPStatus == "paused" || st.QMPStatus == "prelaunch" || st.QMPStatus == "suspended"):
		return "paused"
	case st.Status == "running" || st.Status == "stopped":
		return st.Status
	}
	return "unknown"
}

// vmConfig is the part of GET .../config we read.
type vmConfig map[string]any

func (c vmConfig) str(key string) string {
	switch v := c[key].(type) {
	case string:
		return v
	case float64:
		return fmt.Sprint(v)
	case nil:
		return ""
	}
	return fmt.Sprint(c[key])
}

func (b *Backend) status(ctx context.Context, node string, vmid int) (vmStatus, error) {
	var st vmStatus
	err := b.get(ctx, fmt.Sprintf("read the status of vmid %d", vmid), vmPath(node, vmid)+"/status/current", nil, &st)
	return st, err
}

func (b *Backend) config(ctx context.Context, node string, vmid int) (vmConfig, error) {
	var cfg vmConfig
	err := b.get(ctx, fmt.Sprintf("read the config of vmid %d", vmid), vmPath(node, vmid)+"/config", nil, &cfg)
	return cfg, err
}

// VM reads one VM afresh from its own config and status (the resource
// list lags). A VM still being cloned (this token's, whose task runs, or
// one PVE shows locked "clone") is an error saying so and naming the task
// to wait for; one this token is still creating answers from what the
// token asked for (PVE shows it to nobody but root until its task has
// added it to its pool). Pool comes from poolOf.
func (b *Backend) VM(ctx context.Context, vmid int) (backends.VM, error) {
	if c, st, running := b.ownTask(ctx, vmid); running {
		if st.Type == "qmclone" {
			return backends.VM{}, errCloning(vmid, c.upid)
		}
		return c.vm(), nil // a create: nothing to copy, so nothing to wait for
	}
	var out backends.VM
	err := b.withVM(ctx, vmid, func(node string) error {
		cfg, err := b.config(ctx, node, vmid)
		if err != nil {
			return err
		}
		st, err := b.status(ctx, node, vmid)
		if err != nil {
			return err
		}
		if err := b.lockedCloning(vmid, st.Lock); err != nil {
			return err
		}
		out = backends.VM{VMID: vmid, Name: cfg.str("name"), Node: node, Status: st.state(),
			Template: cfg.str("template") == "1"}
		return nil
	})
	if err != nil {
		return backends.VM{}, err
	}
	if out.Template {
		return out, nil
	}
	listed := false
	if rows, err := b.rows(ctx, false); err == nil {
		for _, r := range rows {
			if int(r.VMID) == vmid {
				if r.Pool != "" {
					out.Pool = r.Pool
					return out, nil
				}
				listed = true
			}
		}
	}
	out.Pool = b.poolOf(ctx, vmid, out.Name, listed)
	return out, nil
}

// ownTask answers the record of a VM this token is still cloning or
// creating, and its task's status, when that task still runs.
func (b *Backend) ownTask(ctx context.Context, vmid int) (createdVM, backends.TaskStatus, bool) {
	c, ok := b.tok.createdRecord(vmid)
	if !ok || !c.ended.IsZero() {
		return createdVM{}, backends.TaskStatus{}, false
	}
	st, err := b.TaskStatus(ctx, c.upid)
	return c, st, err == nil && st.Running
}

// stillCloning answers errCloning for a VM this token is still cloning:
// PVE hides it from a token with rights only on its pool until its task
// ends, and until then it can be neither used nor called "stopped".
func (b *Backend) stillCloning(ctx context.Context, vmid int) error {
	if c, st, running := b.ownTask(ctx, vmid); running && st.Type == "qmclone" {
		return errCloning(vmid, c.upid)
	}
	return nil
}

// lockedCloning answers errCloning for a VM PVE locks "clone" while its
// copy runs (as a token that may read it sees it); other locks (backup,
// snapshot) leave the VM usable.
func (b *Backend) lockedCloning(vmid int, lock string) error {
	if lock != "clone" {
		return nil
	}
	upid := ""
	if c, ok := b.tok.createdRecord(vmid); ok {
		upid = c.upid
	}
	return errCloning(vmid, upid)
}

// errCloning says a VM is still being cloned and to wait for its task,
// naming the task when this process started it.
func errCloning(vmid int, upid string) error {
	hint := fmt.Sprintf("call vm_task_wait upid=%s; once it answers done, call this again", upid)
	if upid == "" {
		hint = fmt.Sprintf("call vm_task_wait with the upid vm_clone answered, then call this again; if no clone task of vmid %d runs (the node's task log), ask the PVE administrator to unlock it (qm unlock %d)", vmid, vmid)
	}
	return backends.WithHint(fmt.Errorf("pve: vmid %d is still being cloned (PVE locks it until the copy ends)", vmid), hint)
}

// poolOf finds the pool of a VM named name whose resource row (listed:
// one is there) does not show it, from what this token can read with or
// without Pool.Audit: this token's record of having created it into that
// pool; the members of the token's pools (GET /pools?poolid=, which PVE
// 8.1 and later answer without Pool.Audit; older ones need it), cached
// like the VM list. A VM in none of the token's pools answers "".
func (b *Backend) poolOf(ctx context.Context, vmid int, name string, listed bool) string {
	if c, ok := b.tok.createdRecord(vmid); ok {
		if name == "" || c.name == name {
			return c.pool
		}
		b.tok.forgetCreated(vmid) // another VM has that vmid now
	}
	ident, err := b.identity(ctx)
	if err != nil || ident.err != nil {
		return ""
	}
	for _, p := range ident.pools {
		if listed && ident.audited[p] {
			continue // its row would have shown the pool
		}
		if b.members(ctx, p)[vmid] {
			return p
		}
	}
	return ""
}

// members answers the vmids in pool, cached 10 s per token and re-read
// after any mutation; nil when the token may not read them.
func (b *Backend) members(ctx context.Context, pool string) map[int]bool {
	s := b.tok
	gen := b.cl.generation()
	s.mu.Lock()
	if m, ok := s.members[pool]; ok && m.gen == gen && time.Since(m.at) < m.ttl {
		s.mu.Unlock()
		return m.vmids
	}
	s.mu.Unlock()
	type poolAnswer struct {
		Members []struct {
			VMID flexInt `json:"vmid"`
		} `json:"members"`
	}
	var ans []poolAnswer
	err := b.get(ctx, "read pool "+pool, "/pools", url.Values{"poolid": {pool}}, &ans)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == 400 {
		// PVE before 8.1 has no ?poolid: the deprecated path, which needs
		// Pool.Audit.
		var one poolAnswer
		err = b.get(ctx, "read pool "+pool, "/pools/"+url.PathEscape(pool), nil, &one)
		ans = []poolAnswer{one}
	}
	var ids map[int]bool
	ttl := vmListTTL
	if err == nil {
		ids = map[int]bool{}
		for _, a := range ans {
			for _, m := range a.Members {
				ids[int(m.VMID)] = true
			}
		}
	} else if !errors.Is(err, ErrPermission) {
		// Transient: ask again soon, but not once per VM of one list.
		b.log.DebugContext(ctx, "pve: reading pool members failed", "pool", pool, "err", err)
		ttl = time.Second
	}
	s.mu.Lock()
	s.members[pool] = poolMembers{vmids: ids, gen: gen, at: time.Now(), ttl: ttl}
	s.mu.Unlock()
	return ids
}

// locate answers the node of a VM: a known node, a resource row, a fresh
// resource list, and last each node's own VM list (which does not lag).
// cached says whether the answer may be stale.
func (b *Backend) locate(ctx context.Context, vmid int, fresh bool) (node string, cached bool, err error) {
	if !fresh {
		if n, ok := b.cl.nodeOf(vmid); ok {
			return n, true, nil
		}
	}
	rows, err := b.rows(ctx, fresh)
	if err != nil {
		return "", false, err
	}
	for _, r := range rows {
		if int(r.VMID) == vmid && r.Node != "" {
			return r.Node, !fresh, nil
		}
	}
	var nodes []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	if err := b.get(ctx, "list nodes", "/nodes", nil, &nodes); err != nil {
		return "", false, err
	}
	for _, n := range nodes {
		if n.Status != "" && n.Status != "online" {
			continue
		}
		var vms []struct {
			VMID flexInt `json:"vmid"`
		}
		if err := b.get(ctx, "list the VMs of node "+n.Node, "/nodes/"+url.PathEscape(n.Node)+"/qemu", nil, &vms); err != nil {
			continue // an unreachable node: look at the others
		}
		for _, v := range vms {
			if int(v.VMID) == vmid {
				b.cl.learnNode(vmid, n.Node)
				return n.Node, false, nil
			}
		}
	}
	return "", false, fmt.Errorf("pve: vmid %d: %w on any node (or not visible to this token)", vmid, backends.ErrNotFound)
}

// withVM runs op with the VM's node, locating it afresh once when a cached
// node turns out wrong (the VM moved, was destroyed, or the vmid reused).
// PVE answers 403 rather than "does not exist" for a vmid outside the
// token's ACLs, so both send it looking again; but only "does not exist"
// drops the shared node hint: a refusal says something about this token,
// not about the cluster.
func (b *Backend) withVM(ctx context.Context, vmid int, op func(node string) error) error {
	node, cached, err := b.locate(ctx, vmid, false)
	if err != nil {
		return err
	}
	err = op(node)
	refused := errors.Is(err, ErrPermission)
	if !cached || !(errors.Is(err, backends.ErrNotFound) || refused) {
		return err
	}
	if !refused {
		b.cl.forgetNode(vmid, node)
	}
	fresh, _, lerr := b.locate(ctx, vmid, true)
	if lerr != nil {
		return lerr
	}
	if refused && fresh == node {
		return err // the node was right: the token may not
	}
	return op(fresh)
}

// checkName refuses a name some VM already has, including VMs this token
// created that the resource list does not show yet (or shows to nobody
// while their clone runs).
func (b *Backend) checkName(ctx context.Context, name string) error {
	if c, ok := b.tok.createdNamed(name); ok {
		taken, err := b.stillThere(ctx, c)
		if err != nil {
			return err
		}
		if taken {
			return fmt.Errorf("pve: the name %q is taken by vmid %d: %w", name, c.vmid, backends.ErrExists)
		}
		b.tok.forgetCreated(c.vmid)
	}
	rows, err := b.rows(ctx, true)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Name != name {
			continue
		}
		// The list lags a destroy: a VM whose config is gone (or whose ACL
		// went with it) is no conflict.
		_, err := b.config(ctx, r.Node, int(r.VMID))
		if errors.Is(err, backends.ErrNotFound) || errors.Is(err, ErrPermission) {
			continue
		}
		return fmt.Errorf("pve: the name %q is taken by vmid %d: %w", name, r.VMID, backends.ErrExists)
	}
	return nil
}

// stillThere says whether a VM this token created still exists under its
// name: its config reads so, or its task is still running (PVE answers 403
// for it until the task adds it to its pool). A failed task took it with
// it; a config gone, or refused once the task ended, means destroyed.
func (b *Backend) stillThere(ctx context.Context, c createdVM) (bool, error) {
	cfg, err := b.config(ctx, c.node, c.vmid)
	switch {
	case err == nil:
		return cfg.str("name") == c.name, nil
	case !errors.Is(err, backends.ErrNotFound) && !errors.Is(err, ErrPermission):
		return false, err
	}
	st, err := b.TaskStatus(ctx, c.upid)
	if err != nil {
		if errors.Is(err, backends.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return st.Running, nil
}

func (b *Backend) nextID(ctx context.Context) (int, error) {
	var id flexInt
	if err := b.get(ctx, "get the next free vmid", "/cluster/nextid", nil, &id); err != nil {
		return 0, err
	}
	if id < 100 {
		return 0, fmt.Errorf("pve: /cluster/nextid answered %d, not a vmid", id)
	}
	return int(id), nil
}

// Clone clones a template into req.Pool under a new vmid from
// /cluster/nextid and answers it with the clone task. A name some VM has
// already is refused with ErrExists naming that vmid.
func (b *Backend) Clone(ctx context.Context, req backends.CloneRequest) (int, backends.Task, error) {
	if req.Name == "" {
		return 0, backends.Task{}, errors.New("pve: a clone needs a name")
	}
	if err := b.checkName(ctx, req.Name); err != nil {
		return 0, backends.Task{}, err
	}
	var newid int
	var upid string
	err := b.withVM(ctx, req.Template, func(node string) error {
		var err error
		newid, upid, err = b.createWithNextID(ctx, func(id int) (string, error) {
			body := map[string]any{"newid": id, "name": req.Name, "full": b2i(req.Full)}
			if req.Pool != "" {
				body["pool"] = req.Pool
			}
			var upid string
			err := b.post(ctx, fmt.Sprintf("clone template %d", req.Template), vmPath(node, req.Template)+"/clone", body, &upid)
			return upid, err
		})
		if err == nil {
			b.tok.remember(createdVM{vmid: newid, name: req.Name, node: node, pool: req.Pool, upid: upid})
			b.cl.learnNode(newid, node)
		}
		return err
	})
	if err != nil {
		return 0, backends.Task{}, err
	}
	b.cl.invalidate()
	b.tok.memo(upid, taskMemo{vmid: newid})
	b.log.InfoContext(ctx, "pve: cloning", "template", req.Template, "vmid", newid, "name", req.Name, "pool", req.Pool, "full", req.Full, "upid", upid)
	return newid, backends.Task{ID: upid, VMID: newid}, nil
}

// createWithNextID runs create with a fresh vmid, again (at most twice
// more) when another caller took that vmid first: PVE refused, so nothing
// was created and trying again is safe.
func (b *Backend) createWithNextID(ctx context.Context, create func(id int) (string, error)) (int, string, error) {
	for attempt := 0; ; attempt++ {
		id, err := b.nextID(ctx)
		if err != nil {
			return 0, "", err
		}
		upid, err := create(id)
		if err == nil {
			if upid == "" {
				return 0, "", fmt.Errorf("pve: creating vmid %d: PVE answered no task id", id)
			}
			return id, upid, nil
		}
		var ae *APIError
		if attempt >= 2 || !errors.As(err, &ae) || !strings.Contains(ae.Message, fmt.Sprint(id)) ||
			!errors.Is(err, backends.ErrExists) {
			return 0, "", err
		}
	}
}

// Start boots a VM; a running VM answers a finished no-op task.
func (b *Backend) Start(ctx context.Context, vmid int) (backends.Task, error) {
	if err := b.stillCloning(ctx, vmid); err != nil {
		return backends.Task{}, err
	}
	var task backends.Task
	err := b.withVM(ctx, vmid, func(node string) error {
		st, err := b.status(ctx, node, vmid)
		if err != nil {
			return err
		}
		if err := b.lockedCloning(vmid, st.Lock); err != nil {
			return err
		}
		if st.Status == "running" {
			task = b.noopTask(node, "qmstart", vmid)
			return nil
		}
		task, err = b.vmTask(ctx, node, vmid, "start vmid", "/status/start", nil)
		return err
	})
	return task, err
}

// Stop shuts a VM down: PVE's qmshutdown with timeout 60 and forceStop=1
// (ACPI or agent first, then a hard stop in the same task). A paused VM is
// stopped hard (it cannot react to ACPI); a stopped VM answers a finished
// no-op task.
func (b *Backend) Stop(ctx context.Context, vmid int) (backends.Task, error) {
	var task backends.Task
	err := b.withVM(ctx, vmid, func(node string) error {
		st, err := b.status(ctx, node, vmid)
		if err != nil {
			return err
		}
		switch st.state() {
		case "stopped":
			task = b.noopTask(node, "qmstop", vmid)
			return nil
		case "paused":
			task, err = b.vmTask(ctx, node, vmid, "stop vmid", "/status/stop", nil)
		default:
			task, err = b.vmTask(ctx, node, vmid, "shut down vmid", "/status/shutdown",
				map[string]any{"timeout": shutdownTimeout, "forceStop": 1})
		}
		return err
	})
	return task, err
}

// Destroy stops a running VM hard (waiting for that within ctx), then
// deletes it with purge=1 and destroy-unreferenced-disks=1.
func (b *Backend) Destroy(ctx context.Context, vmid int) (backends.Task, error) {
	if err := b.stillCloning(ctx, vmid); err != nil {
		return backends.Task{}, err
	}
	var task backends.Task
	err := b.withVM(ctx, vmid, func(node string) error {
		st, err := b.status(ctx, node, vmid)
		if err != nil {
			return err
		}
		if err := b.lockedCloning(vmid, st.Lock); err != nil {
			return err
		}
		if st.Status != "stopped" {
			stop, err := b.vmTask(ctx, node, vmid, "stop vmid", "/status/stop", nil)
			if err != nil {
				return err
			}
			if err := b.finish(ctx, stop, fmt.Sprintf("stopping vmid %d before destroying it", vmid)); err != nil {
				return err
			}
		}
		var upid string
		q := url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}}
		if err := b.del(ctx, fmt.Sprintf("destroy vmid %d", vmid), vmPath(node, vmid), q, &upid); err != nil {
			return err
		}
		task = backends.Task{ID: upid, VMID: vmid}
		return nil
	})
	if err != nil {
		return backends.Task{}, err
	}
	b.cl.invalidate()
	if node, ok := b.cl.nodeOf(vmid); ok {
		b.cl.forgetNode(vmid, node)
	}
	b.tok.forgetCreated(vmid)
	b.closeConsoles(vmid)
	b.log.InfoContext(ctx, "pve: destroying", "vmid", vmid, "upid", task.ID)
	return task, nil
}

// vmTask POSTs a VM action that answers a UPID.
func (b *Backend) vmTask(ctx context.Context, node string, vmid int, op, suffix string, body map[string]any) (backends.Task, error) {
	var upid string
	if err := b.post(ctx, fmt.Sprintf("%s %d", op, vmid), vmPath(node, vmid)+suffix, body, &upid); err != nil {
		return backends.Task{}, err
	}
	b.cl.invalidate()
	if upid == "" {
		return backends.Task{}, fmt.Errorf("pve: %s %d: PVE answered no task id", op, vmid)
	}
	return backends.Task{ID: upid, VMID: vmid}, nil
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
