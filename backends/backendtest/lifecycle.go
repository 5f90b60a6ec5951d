package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/poligon/poligon/backends"
)

// Templates lists the templates, in vmid order.
func (b *Backend) Templates(ctx context.Context) ([]backends.Template, error) {
	if err := b.enter(ctx, "Templates", 0, nil); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backends.Template
	for _, id := range b.idsLocked() {
		if v := b.vms[id]; v.info.Template {
			out = append(out, backends.Template{VMID: id, Name: v.info.Name, Node: Node})
		}
	}
	return out, nil
}

// VMs lists the VMs, templates left out, in vmid order.
func (b *Backend) VMs(ctx context.Context) ([]backends.VM, error) {
	if err := b.enter(ctx, "VMs", 0, nil); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backends.VM
	for _, id := range b.idsLocked() {
		if v := b.vms[id]; !v.info.Template {
			out = append(out, v.info)
		}
	}
	return out, nil
}

// VM answers one VM or template; an unknown vmid wraps ErrNotFound.
func (b *Backend) VM(ctx context.Context, vmid int) (backends.VM, error) {
	if err := b.enter(ctx, "VM", vmid, nil); err != nil {
		return backends.VM{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return backends.VM{}, err
	}
	return v.info, nil
}

func (b *Backend) idsLocked() []int {
	ids := make([]int, 0, len(b.vms))
	for id := range b.vms {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// nextIDLocked is the lowest free vmid from 100, as PVE's nextid.
func (b *Backend) nextIDLocked() int {
	id := 100
	for b.vms[id] != nil {
		id++
	}
	return id
}

// nameTakenLocked refuses a name another VM or template has.
func (b *Backend) nameTakenLocked(name string) error {
	for _, v := range b.vms {
		if v.info.Name == name {
			return fmt.Errorf("a VM named %s (vmid %d): %w", name, v.info.VMID, backends.ErrExists)
		}
	}
	return nil
}

// Clone makes a stopped VM from a template at once, in req.Pool; the
// clone task holds nothing back unless tasks of type qmclone are held.
func (b *Backend) Clone(ctx context.Context, req backends.CloneRequest) (int, backends.Task, error) {
	args := []string{req.Name}
	if req.Full {
		args = append(args, "full")
	}
	if req.Pool != "" {
		args = append(args, "pool="+req.Pool)
	}
	if err := b.enter(ctx, "Clone", req.Template, req, args...); err != nil {
		return 0, backends.Task{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.vms[req.Template]; !ok || !t.info.Template {
		return 0, backends.Task{}, fmt.Errorf("template vmid %d: %w", req.Template, backends.ErrNotFound)
	}
	if req.Name == "" {
		return 0, backends.Task{}, errors.New("backendtest: a clone needs a name")
	}
	if err := b.nameTakenLocked(req.Name); err != nil {
		return 0, backends.Task{}, err
	}
	id := b.nextIDLocked()
	b.vms[id] = b.newVM(backends.VM{VMID: id, Name: req.Name, Node: Node, Status: "stopped", Pool: req.Pool})
	return id, b.startTaskLocked("qmclone", id, func() {}), nil
}

// Start boots a stopped VM; a running VM answers a finished no-op task.
func (b *Backend) Start(ctx context.Context, vmid int) (backends.Task, error) {
	if err := b.enter(ctx, "Start", vmid, nil); err != nil {
		return backends.Task{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return backends.Task{}, err
	}
	switch {
	case v.info.Template:
		return backends.Task{}, fmt.Errorf("vmid %d is a template: clone it to start it", vmid)
	case v.info.Status == "running":
		return b.tasks.Start("qmstart", vmid, func(context.Context) error { return nil }), nil
	}
	return b.startTaskLocked("qmstart", vmid, func() { v.info.Status = "running" }), nil
}

// Stop powers a VM off; a stopped VM answers a finished no-op task.
func (b *Backend) Stop(ctx context.Context, vmid int) (backends.Task, error) {
	if err := b.enter(ctx, "Stop", vmid, nil); err != nil {
		return backends.Task{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return backends.Task{}, err
	}
	if v.info.Status == "stopped" {
		return b.tasks.Start("qmstop", vmid, func(context.Context) error { return nil }), nil
	}
	return b.startTaskLocked("qmstop", vmid, func() { v.stop() }), nil
}

// stop ends what a running VM had: its programs. b.mu is held.
func (v *vm) stop() {
	v.info.Status = "stopped"
	clear(v.procs)
}

// Destroy removes a VM, stopping it first; a template is refused.
func (b *Backend) Destroy(ctx context.Context, vmid int) (backends.Task, error) {
	if err := b.enter(ctx, "Destroy", vmid, nil); err != nil {
		return backends.Task{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return backends.Task{}, err
	}
	if v.info.Template {
		return backends.Task{}, fmt.Errorf("vmid %d is a template: not destroyed", vmid)
	}
	return b.startTaskLocked("qmdestroy", vmid, func() {
		v.stop()
		if b.vms[vmid] == v {
			delete(b.vms, vmid)
		}
	}), nil
}

// TaskStatus reports on a task.
func (b *Backend) TaskStatus(ctx context.Context, id string) (backends.TaskStatus, error) {
	if err := b.enter(ctx, "TaskStatus", 0, nil, id); err != nil {
		return backends.TaskStatus{}, err
	}
	return b.tasks.Status(id)
}

// WaitTask blocks until the task ends or ctx does.
func (b *Backend) WaitTask(ctx context.Context, id string) (backends.TaskStatus, error) {
	if err := b.enter(ctx, "WaitTask", 0, nil, id); err != nil && ctx.Err() == nil {
		return backends.TaskStatus{}, err
	}
	// ctx ending is no error here (the interface's rule): the status says
	// the task still runs.
	return b.tasks.Wait(ctx, id)
}

// HoldTasks keeps later tasks of the given types ("qmstart", "qmclone",
// "qmstop", "qmdestroy", "qmsnapshot", "qmrollback", "qmcreate"; none:
// every type) running until FinishTask. A held task's effect (the VM
// running, gone, ...) applies when it finishes well.
func (b *Backend) HoldTasks(types ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(types) == 0 {
		types = []string{""}
	}
	for _, t := range types {
		b.hold[t] = true
	}
}

// HeldTasks answers the UPIDs of the held tasks still running.
func (b *Backend) HeldTasks() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id := range b.held {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// FinishTask ends a held task with exit ("OK" or a failure text) and
// returns once its status says so.
func (b *Backend) FinishTask(upid, exit string) error {
	b.mu.Lock()
	h, ok := b.held[upid]
	delete(b.held, upid)
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("backendtest: task %s is not held", upid)
	}
	h.finish <- exit
	_, err := b.tasks.Wait(context.Background(), upid)
	return err
}

// startTaskLocked starts a task whose effect applies when it ends well: at
// once, or when FinishTask ends it if its type is held. b.mu is held.
func (b *Backend) startTaskLocked(typ string, vmid int, effect func()) backends.Task {
	if !b.hold[typ] && !b.hold[""] {
		effect()
		return b.tasks.Start(typ, vmid, func(context.Context) error { return nil })
	}
	h := &heldTask{finish: make(chan string, 1), effect: effect}
	task := b.tasks.Start(typ, vmid, func(context.Context) error {
		exit := <-h.finish
		if exit != "OK" {
			return errors.New(exit)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		h.effect()
		return nil
	})
	b.held[task.ID] = h
	return task
}

// Snapshot saves a VM's state under name; a name taken wraps ErrExists.
func (b *Backend) Snapshot(ctx context.Context, vmid int, name string) (backends.Task, error) {
	if err := b.enter(ctx, "Snapshot", vmid, nil, name); err != nil {
		return backends.Task{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return backends.Task{}, err
	}
	if slices.Contains(v.snapshots, name) {
		return backends.Task{}, fmt.Errorf("vmid %d: snapshot %q %w", vmid, name, backends.ErrExists)
	}
	return b.startTaskLocked("qmsnapshot", vmid, func() { v.snapshots = append(v.snapshots, name) }), nil
}

// Rollback restores a snapshot and leaves the VM running; an unknown
// snapshot wraps ErrNotFound.
func (b *Backend) Rollback(ctx context.Context, vmid int, name string) (backends.Task, error) {
	if err := b.enter(ctx, "Rollback", vmid, nil, name); err != nil {
		return backends.Task{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return backends.Task{}, err
	}
	if !slices.Contains(v.snapshots, name) {
		return backends.Task{}, fmt.Errorf("vmid %d: snapshot %q: %w", vmid, name, backends.ErrNotFound)
	}
	return b.startTaskLocked("qmrollback", vmid, func() { clear(v.procs); v.info.Status = "running" }), nil
}

// ListSnapshots answers a VM's snapshot names, oldest first.
func (b *Backend) ListSnapshots(ctx context.Context, vmid int) ([]string, error) {
	if err := b.enter(ctx, "ListSnapshots", vmid, nil); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return nil, err
	}
	return slices.Clone(v.snapshots), nil
}

// ISOs lists the images added with AddISO, whatever the storage.
func (b *Backend) ISOs(ctx context.Context, storage string) ([]backends.ISO, error) {
	if err := b.enter(ctx, "ISOs", 0, nil, storage); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.isos), nil
}

// CreateFromISO makes a stopped VM with req.Disks disks (at least one).
func (b *Backend) CreateFromISO(ctx context.Context, req backends.ISORequest) (int, backends.Task, error) {
	if err := b.enter(ctx, "CreateFromISO", 0, req, req.Name, req.ISO); err != nil {
		return 0, backends.Task{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.ContainsFunc(b.isos, func(i backends.ISO) bool { return i.VolID == req.ISO }) {
		return 0, backends.Task{}, fmt.Errorf("iso %s: %w", req.ISO, backends.ErrNotFound)
	}
	if err := b.nameTakenLocked(req.Name); err != nil {
		return 0, backends.Task{}, err
	}
	id := b.nextIDLocked()
	v := b.newVM(backends.VM{VMID: id, Name: req.Name, Node: Node, Status: "stopped", Pool: req.Pool})
	for i := 1; i < req.Disks; i++ {
		v.disks = append(v.disks, "scsi"+strconv.Itoa(i))
	}
	b.vms[id] = v
	return id, b.startTaskLocked("qmcreate", id, func() {}), nil
}

// Eject empties a VM's CD drive.
func (b *Backend) Eject(ctx context.Context, vmid int) error {
	if err := b.enter(ctx, "Eject", vmid, nil); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_, err := b.vmLocked(vmid)
	return err
}

// ResizeDisk grows one of a VM's disks; an unknown disk wraps ErrNotFound.
func (b *Backend) ResizeDisk(ctx context.Context, vmid int, disk string, sizeGB int) error {
	if err := b.enter(ctx, "ResizeDisk", vmid, nil, disk, strconv.Itoa(sizeGB)); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return err
	}
	if !slices.Contains(v.disks, disk) {
		return fmt.Errorf("vmid %d disk %s: %w", vmid, disk, backends.ErrNotFound)
	}
	return nil
}

// AddDisks adds count disks, named on from the VM's last (scsi1, ...).
func (b *Backend) AddDisks(ctx context.Context, vmid int, sizeGB, count int) ([]string, error) {
	if err := b.enter(ctx, "AddDisks", vmid, nil, strconv.Itoa(sizeGB), strconv.Itoa(count)); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.vmLocked(vmid)
	if err != nil {
		return nil, err
	}
	var added []string
	for range count {
		name := "scsi" + strconv.Itoa(len(v.disks))
		v.disks = append(v.disks, name)
		added = append(added, name)
	}
	return added, nil
}

// Identified is the fake serving backends.Identity too, as a Proxmox
// token does: sessions on it take their owner and pools from it.
type Identified struct {
	*Backend
	owner string
	pools []string
}

// WithIdentity answers b as a backend whose credentials name owner, who
// may use pools.
func (b *Backend) WithIdentity(owner string, pools ...string) *Identified {
	return &Identified{Backend: b, owner: owner, pools: pools}
}

// Identity answers the owner and pools given to WithIdentity.
func (i *Identified) Identity(ctx context.Context) (string, []string, error) {
	if err := i.enter(ctx, "Identity", 0, nil); err != nil {
		return "", nil, err
	}
	return i.owner, slices.Clone(i.pools), nil
}
