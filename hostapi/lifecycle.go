package hostapi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
)

// TaskResult is a backend task after a bounded wait.
type TaskResult struct {
	UPID    string
	Done    bool // finished (well or badly) within the wait
	Failed  bool
	Status  string // the backend's exit status
	Elapsed time.Duration
}

// Err turns a failed task into an error.
func (r TaskResult) Err() error {
	if r.Failed {
		return Failf("look at the VM's state with vm_list_my_vms; the task's own message is above", "task failed: %s", r.Status)
	}
	return nil
}

// Templates lists the clonable templates; names containing not-for-clone
// are hidden.
func (c *Caller) Templates(ctx context.Context) ([]backends.Template, error) {
	lc, err := c.lifecycle()
	if err != nil {
		return nil, err
	}
	tpls, err := lc.Templates(ctx)
	if err != nil {
		return nil, wrap(err, "", "list templates")
	}
	out := tpls[:0]
	for _, t := range tpls {
		if !strings.Contains(t.Name, "not-for-clone") {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Name < out[j].Name || out[i].Name == out[j].Name && out[i].VMID < out[j].VMID
	})
	return out, nil
}

// MyVMs lists the caller's VMs.
func (c *Caller) MyVMs(ctx context.Context) ([]backends.VM, error) {
	lc, err := c.lifecycle()
	if err != nil {
		return nil, err
	}
	vms, err := lc.VMs(ctx)
	if err != nil {
		return nil, wrap(err, "", "list VMs")
	}
	var mine []backends.VM
	for _, vm := range vms {
		if c.owns(vm) {
			mine = append(mine, vm)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].VMID < mine[j].VMID })
	return mine, nil
}

// CloneResult is a new (or already existing) VM.
type CloneResult struct {
	VMID    int
	Name    string
	Node    string
	Task    TaskResult
	Existed bool // a VM of that name was there already: nothing was cloned
}

// Clone clones a template as <owner>-repro-<name> and waits up to wait for
// the copy. A name already taken answers the existing VM instead of a
// second clone.
func (c *Caller) Clone(ctx context.Context, template int, name string, full bool, pool string, wait time.Duration) (CloneResult, error) {
	return c.CloneVM(ctx, CloneSpec{Template: template, Name: name, Full: full, Pool: pool, Wait: wait})
}

// CloneSpec is a clone as Clone takes it, plus the stand network the VM
// joins (backends.CloneRequest.Network).
type CloneSpec struct {
	Template int
	Name     string // without the owner prefix
	Full     bool
	Pool     string
	Network  string
	Wait     time.Duration
}

// CloneVM is Clone with every option.
func (c *Caller) CloneVM(ctx context.Context, s CloneSpec) (CloneResult, error) {
	template, name, full, pool, wait := s.Template, s.Name, s.Full, s.Pool, s.Wait
	lc, err := c.lifecycle()
	if err != nil {
		return CloneResult{}, err
	}
	fullName := c.VMName(name)
	tpls, err := c.Templates(ctx)
	if err != nil {
		return CloneResult{}, err
	}
	var tpl *backends.Template
	for i := range tpls {
		if tpls[i].VMID == template {
			tpl = &tpls[i]
		}
	}
	if tpl == nil {
		return CloneResult{}, Failf("vm_list_templates lists the templates you can clone", "template %d not found", template)
	}
	if pool, err = c.pickPool(pool); err != nil {
		return CloneResult{}, err
	}
	vms, err := lc.VMs(ctx)
	if err != nil {
		return CloneResult{}, wrap(err, "", "list VMs")
	}
	for _, vm := range vms {
		if vm.Name == fullName {
			// The list may lag a destroy or a rename: a VM gone is no conflict.
			if cur, err := lc.VM(ctx, vm.VMID); errors.Is(err, backends.ErrNotFound) || err == nil && cur.Name != fullName {
				continue
			}
			if !c.owns(vm) {
				return CloneResult{}, Failf("pick another name", "a VM named %s exists (vmid %d) but is not yours", fullName, vm.VMID)
			}
			return CloneResult{VMID: vm.VMID, Name: vm.Name, Node: vm.Node, Existed: true, Task: TaskResult{Done: true}}, nil
		}
	}
	vmid, task, err := lc.Clone(ctx, backends.CloneRequest{Template: template, Name: fullName, Full: full, Pool: pool, Network: s.Network})
	if errors.Is(err, backends.ErrExists) {
		return CloneResult{}, wrap(err, "vm_list_my_vms shows it once the backend lists it; use that vmid", "")
	}
	if err != nil {
		return CloneResult{}, wrap(err, "", "clone template %d", template)
	}
	res := CloneResult{VMID: vmid, Name: fullName, Node: tpl.Node}
	res.Task, err = c.waitTask(ctx, task.ID, wait)
	return res, err
}

// pickPool answers the pool to create VMs in: the requested one if it is
// the caller's, else the caller's only pool.
func (c *Caller) pickPool(pool string) (string, error) {
	if c.pools == nil {
		return pool, nil
	}
	switch {
	case pool != "":
		for _, p := range c.pools {
			if p == pool {
				return pool, nil
			}
		}
		return "", Failf("your pools: "+strings.Join(c.pools, ", "), "pool %q is not one of yours", pool)
	case len(c.pools) == 1:
		return c.pools[0], nil
	default:
		return "", Failf("pass pool=<one of "+strings.Join(c.pools, ", ")+">", "you have several pools: say which")
	}
}

// WaitTask waits up to wait (capped at MaxWait) for a task the
// caller names: one of a VM of theirs.
func (c *Caller) WaitTask(ctx context.Context, upid string, wait time.Duration) (TaskResult, error) {
	tasks, err := backends.As[backends.Tasks](c.be, "tasks")
	if err != nil {
		return TaskResult{}, err
	}
	if err := c.ownsTask(ctx, tasks, upid); err != nil {
		return TaskResult{}, err
	}
	return c.waitTask(ctx, upid, wait)
}

// waitTask waits for a task this caller started.
func (c *Caller) waitTask(ctx context.Context, upid string, wait time.Duration) (TaskResult, error) {
	tasks, err := backends.As[backends.Tasks](c.be, "tasks")
	if err != nil {
		return TaskResult{}, err
	}
	limit := c.clampWait(wait)
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stopProgress := c.reportWhile(wctx, "waiting for task "+upid, limit)
	st, err := tasks.WaitTask(wctx, upid)
	stopProgress()
	if err != nil {
		if errors.Is(err, backends.ErrNotFound) {
			return TaskResult{}, wrap(err, "pass the upid exactly as a previous answer gave it", "")
		}
		return TaskResult{}, wrap(err, "", "task %s", upid)
	}
	return TaskResult{UPID: upid, Done: !st.Running, Failed: st.Failed(), Status: st.ExitStatus, Elapsed: time.Since(start)}, nil
}

// ownsTask refuses a task of a VM that exists and is not the caller's: task
// ids are easy to guess, their status is the owner's business. A task of a
// VM that is gone (a destroy) is answered.
func (c *Caller) ownsTask(ctx context.Context, tasks backends.Tasks, upid string) error {
	st, err := tasks.TaskStatus(ctx, upid)
	if err != nil || st.VMID == 0 {
		return nil // WaitTask reports an unknown task itself
	}
	lc, err := c.lifecycle()
	if err != nil {
		return nil
	}
	vm, err := lc.VM(ctx, st.VMID)
	if err == nil && !c.owns(vm) && !vm.Template {
		return Failf(notFoundHint, "task %s is about vmid %d, which is not yours", upid, st.VMID)
	}
	return nil
}

// reportWhile sends a progress line every 2 s until stopped.
func (c *Caller) reportWhile(ctx context.Context, what string, total time.Duration) (stop func()) {
	if c.progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				c.progress(what, time.Since(start), total)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// task runs a VM lifecycle operation under the VM's lock and waits up to
// wait seconds for it.
func (v *VM) task(ctx context.Context, wait time.Duration, what string, op func(backends.Lifecycle) (backends.Task, error)) (TaskResult, error) {
	lc, err := v.c.lifecycle()
	if err != nil {
		return TaskResult{}, err
	}
	task, err := op(lc)
	if err != nil {
		return TaskResult{}, wrap(err, "", "%s vmid %d", what, v.info.VMID)
	}
	return v.c.waitTask(ctx, task.ID, wait)
}

// Start boots the VM.
func (v *VM) Start(ctx context.Context, wait time.Duration) (TaskResult, error) {
	return v.task(ctx, wait, "start", func(lc backends.Lifecycle) (backends.Task, error) { return lc.Start(ctx, v.info.VMID) })
}

// Stop powers the VM off.
func (v *VM) Stop(ctx context.Context, wait time.Duration) (TaskResult, error) {
	return v.task(ctx, wait, "stop", func(lc backends.Lifecycle) (backends.Task, error) { return lc.Stop(ctx, v.info.VMID) })
}

// Destroy removes the VM and its disks.
func (v *VM) Destroy(ctx context.Context, wait time.Duration) (TaskResult, error) {
	return v.task(ctx, wait, "destroy", func(lc backends.Lifecycle) (backends.Task, error) { return lc.Destroy(ctx, v.info.VMID) })
}

// Snapshots lists the VM's snapshots by name.
func (v *VM) Snapshots(ctx context.Context) ([]string, error) {
	sn, err := backends.As[backends.Snapshots](v.c.be, "snapshots")
	if err != nil {
		return nil, err
	}
	names, err := sn.ListSnapshots(ctx, v.info.VMID)
	if err != nil {
		return nil, wrap(err, "", "list the snapshots of vmid %d", v.info.VMID)
	}
	return names, nil
}

// Snapshot saves the VM's state under name.
func (v *VM) Snapshot(ctx context.Context, name string, wait time.Duration) (TaskResult, error) {
	sn, err := backends.As[backends.Snapshots](v.c.be, "snapshots")
	if err != nil {
		return TaskResult{}, err
	}
	return v.task(ctx, wait, "snapshot", func(backends.Lifecycle) (backends.Task, error) { return sn.Snapshot(ctx, v.info.VMID, name) })
}

// Rollback restores a snapshot and starts the VM.
func (v *VM) Rollback(ctx context.Context, name string, wait time.Duration) (TaskResult, error) {
	sn, err := backends.As[backends.Snapshots](v.c.be, "snapshots")
	if err != nil {
		return TaskResult{}, err
	}
	return v.task(ctx, wait, "rollback", func(backends.Lifecycle) (backends.Task, error) { return sn.Rollback(ctx, v.info.VMID, name) })
}

// VM is a machine the caller owns, with its lock held (Caller.LockVM).
type VM struct {
	c    *Caller
	info backends.VM
}

// ID answers the vmid.
func (v *VM) ID() int { return v.info.VMID }

// Info answers the VM as the backend described it when it was checked.
func (v *VM) Info() backends.VM { return v.info }

// Caller answers the caller the VM is bound to.
func (v *VM) Caller() *Caller { return v.c }

func (v *VM) String() string { return fmt.Sprintf("vmid %d (%s)", v.info.VMID, v.info.Name) }
