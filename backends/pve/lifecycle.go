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

// rows answers the qemu rows of /cluster/resources, cached 10 s per
// endpoint and token and re-read after any mutation (or when fresh).
func (b *Backend) rows(ctx context.Context, fresh bool) ([]resourceRow, error) {
	s := b.sess
	gen := b.ep.generation()
	s.mu.Lock()
	if !fresh && s.rows != nil && s.rowsGen == gen && time.Since(s.rowsAt) < vmListTTL {
		rows := s.rows
		s.mu.Unlock()
		return rows, nil
	}
	s.mu.Unlock()
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
			b.ep.learnNode(int(r.VMID), r.Node)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].VMID < rows[j].VMID })
	s.mu.Lock()
	s.rows, s.rowsGen, s.rowsAt = rows, gen, time.Now()
	s.mu.Unlock()
	return rows, nil
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

// VMs lists the VMs (templates excluded) from /cluster/resources: it may
// lag a mutation by up to a minute on PVE's side, plus our 10 s cache.
func (b *Backend) VMs(ctx context.Context) ([]backends.VM, error) {
	rows, err := b.rows(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []backends.VM
	for _, r := range rows {
		if r.Template {
			continue
		}
		status := r.Status
		if status == "" {
			status = "unknown"
		}
		out = append(out, backends.VM{VMID: int(r.VMID), Name: r.Name, Node: r.Node, Status: status, Pool: r.Pool})
	}
	return out, nil
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
// list lags); Pool comes from the resource row or pool membership.
func (b *Backend) VM(ctx context.Context, vmid int) (backends.VM, error) {
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
		out = backends.VM{VMID: vmid, Name: cfg.str("name"), Node: node, Status: st.state(),
			Template: cfg.str("template") == "1"}
		return nil
	})
	if err != nil {
		return backends.VM{}, err
	}
	out.Pool = b.poolOf(ctx, vmid)
	return out, nil
}

// poolOf finds a VM's pool: from a resource row (which has no pool without
// Pool.Audit), else from the members of the token's pools.
func (b *Backend) poolOf(ctx context.Context, vmid int) string {
	if rows, err := b.rows(ctx, false); err == nil {
		for _, r := range rows {
			if int(r.VMID) == vmid && r.Pool != "" {
				return r.Pool
			}
		}
	}
	_, pools, _ := b.Identity(ctx)
	for _, p := range pools {
		var ans []struct {
			Members []struct {
				VMID flexInt `json:"vmid"`
			} `json:"members"`
		}
		if err := b.get(ctx, "read pool "+p, "/pools", url.Values{"poolid": {p}}, &ans); err != nil {
			continue
		}
		for _, a := range ans {
			for _, m := range a.Members {
				if int(m.VMID) == vmid {
					return p
				}
			}
		}
	}
	return ""
}

// locate answers the node of a VM: a known node, a resource row, a fresh
// resource list, and last each node's own VM list (which does not lag).
// cached says whether the answer may be stale.
func (b *Backend) locate(ctx context.Context, vmid int, fresh bool) (node string, cached bool, err error) {
	if !fresh {
		if n, ok := b.ep.nodeOf(vmid); ok {
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
				b.ep.learnNode(vmid, n.Node)
				return n.Node, false, nil
			}
		}
	}
	return "", false, fmt.Errorf("pve: vmid %d: %w on any node (or not visible to this token)", vmid, backends.ErrNotFound)
}

// withVM runs op with the VM's node, locating it afresh once when a cached
// node turns out wrong (the VM moved, was destroyed, or the vmid reused).
// PVE answers 403 rather than "does not exist" for a vmid outside the
// token's ACLs, so both send it looking again.
func (b *Backend) withVM(ctx context.Context, vmid int, op func(node string) error) error {
	node, cached, err := b.locate(ctx, vmid, false)
	if err != nil {
		return err
	}
	err = op(node)
	if !cached || !(errors.Is(err, backends.ErrNotFound) || errors.Is(err, ErrPermission)) {
		return err
	}
	b.ep.forget(vmid)
	fresh, _, lerr := b.locate(ctx, vmid, true)
	if lerr != nil {
		return lerr
	}
	return op(fresh)
}

// checkName refuses a name some VM already has, including VMs this process
// created that the resource list does not show yet.
func (b *Backend) checkName(ctx context.Context, name string) error {
	if r, ok := b.ep.recentByName(name); ok {
		// Still there? A failed clone or create is gone, and PVE answers
		// 403 rather than "does not exist" for a vmid outside our ACLs.
		_, err := b.config(ctx, r.node, r.vmid)
		switch {
		case err == nil:
			return fmt.Errorf("pve: the name %q is taken by vmid %d: %w", name, r.vmid, backends.ErrExists)
		case errors.Is(err, backends.ErrNotFound) || errors.Is(err, ErrPermission):
			b.ep.forget(r.vmid)
		default:
			return err
		}
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
			b.ep.remember(req.Name, newid, node)
		}
		return err
	})
	if err != nil {
		return 0, backends.Task{}, err
	}
	b.ep.invalidate()
	b.sess.memo(upid, taskMemo{vmid: newid})
	b.log.Info("pve: cloning", "template", req.Template, "vmid", newid, "name", req.Name, "pool", req.Pool, "full", req.Full, "upid", upid)
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
	var task backends.Task
	err := b.withVM(ctx, vmid, func(node string) error {
		st, err := b.status(ctx, node, vmid)
		if err != nil {
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
	var task backends.Task
	err := b.withVM(ctx, vmid, func(node string) error {
		st, err := b.status(ctx, node, vmid)
		if err != nil {
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
	b.ep.invalidate()
	b.ep.forget(vmid)
	b.closeConsoles(vmid)
	b.log.Info("pve: destroying", "vmid", vmid, "upid", task.ID)
	return task, nil
}

// vmTask POSTs a VM action that answers a UPID.
func (b *Backend) vmTask(ctx context.Context, node string, vmid int, op, suffix string, body map[string]any) (backends.Task, error) {
	var upid string
	if err := b.post(ctx, fmt.Sprintf("%s %d", op, vmid), vmPath(node, vmid)+suffix, body, &upid); err != nil {
		return backends.Task{}, err
	}
	b.ep.invalidate()
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
