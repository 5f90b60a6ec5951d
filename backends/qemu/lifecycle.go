package qemu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/internal/logs"
)

// vmName is what QEMU's -name and a DNS label both accept.
var vmName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Templates lists the templates in the data directory; broken template
// files are skipped here and reported by Check.
func (d *Driver) Templates(ctx context.Context) ([]backends.Template, error) {
	tpls, _ := loadTemplates(d.l.templates())
	out := make([]backends.Template, len(tpls))
	for i, t := range tpls {
		out[i] = backends.Template{VMID: t.VMID, Name: t.Name, Node: Node}
	}
	return out, nil
}

func (d *Driver) template(vmid int) (template, error) {
	tpls, _ := loadTemplates(d.l.templates())
	for _, t := range tpls {
		if t.VMID == vmid {
			return t, nil
		}
	}
	return template{}, fmt.Errorf("template vmid %d: %w", vmid, backends.ErrNotFound)
}

// vmids lists the VMs in the data directory, in order.
func (d *Driver) vmids() []int {
	entries, _ := os.ReadDir(filepath.Join(d.l.data, "vms"))
	var ids []int
	for _, e := range entries {
		if id, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			if _, err := os.Stat(d.l.vmConfig(id)); err == nil {
				ids = append(ids, id)
			}
		}
	}
	sort.Ints(ids)
	return ids
}

func (d *Driver) config(vmid int) (vmConfig, error) {
	c, err := readVMConfig(d.l.vmConfig(vmid))
	if errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotFound)
	}
	if err != nil {
		return c, fmt.Errorf("vmid %d: broken config: %w", vmid, err)
	}
	return c, nil
}

// VMs lists every VM with its live status.
func (d *Driver) VMs(ctx context.Context) ([]backends.VM, error) {
	var out []backends.VM
	for _, id := range d.vmids() {
		vm, err := d.VM(ctx, id)
		if err != nil {
			continue // removed while we looked
		}
		out = append(out, vm)
	}
	return out, nil
}

// VM reads one VM and its live status.
func (d *Driver) VM(ctx context.Context, vmid int) (backends.VM, error) {
	c, err := d.config(vmid)
	if errors.Is(err, backends.ErrNotFound) {
		if t, terr := d.template(vmid); terr == nil {
			return backends.VM{VMID: t.VMID, Name: t.Name, Node: Node, Status: "stopped", Template: true}, nil
		}
	}
	if err != nil {
		return backends.VM{}, err
	}
	vm := backends.VM{VMID: vmid, Name: c.Name, Node: Node}
	vm.Status, vm.StatusNote = d.status(ctx, vmid)
	return vm, nil
}

// Clone makes a VM from a template: a qcow2 overlay on the template's disk
// (linked) or a copy of its files (full). The vmid is answered at once; a
// full copy runs in the task. A name already taken is refused.
func (d *Driver) Clone(ctx context.Context, req backends.CloneRequest) (int, backends.Task, error) {
	if !vmName.MatchString(req.Name) {
		return 0, backends.Task{}, fmt.Errorf("vm name %q: use lowercase letters, digits and dashes (a DNS label, at most 63 characters)", req.Name)
	}
	if req.Network != "" {
		if _, err := d.l.network(req.Network); err != nil {
			return 0, backends.Task{}, err
		}
	}
	t, err := d.template(req.Template)
	if err != nil {
		return 0, backends.Task{}, err
	}
	var need int64
	if req.Full {
		for _, f := range []string{t.Disk, t.Kernel, t.Initrd} {
			if f != "" {
				need += allocatedSize(t.path(f))
			}
		}
		if err := checkFree(filepath.Join(d.l.data, "vms"), need); err != nil {
			return 0, backends.Task{}, fmt.Errorf("full clone of %s: %w", t.Name, err)
		}
	}
	vmid, dir, err := d.reserve(req.Name)
	if err != nil {
		return 0, backends.Task{}, err
	}
	c := vmConfig{
		VMID: vmid, Name: req.Name, Template: t.Name, Created: time.Now().UTC().Truncate(time.Second),
		MemoryMB: t.MemoryMB, Cores: t.Cores, Firmware: t.Firmware, Cmdline: t.Cmdline,
		Kernel: t.path(t.Kernel), Initrd: t.path(t.Initrd),
		Disks:   []disk{{Name: "disk0", File: "disk0.qcow2"}},
		Network: req.Network,
	}
	if req.Full {
		c.Lock = "clone"
	}
	if err := c.write(d.l.vmConfig(vmid)); err != nil {
		os.RemoveAll(dir)
		return 0, backends.Task{}, err
	}
	// A linked clone is a few small files: make them now, so the VM is
	// complete when Clone answers. A full copy goes to the task.
	build := func(ctx context.Context) error {
		if err := d.populate(ctx, &c, t, req.Full); err != nil {
			os.RemoveAll(dir)
			return err
		}
		c.Lock = ""
		return c.write(d.l.vmConfig(vmid))
	}
	if !req.Full {
		if err := build(ctx); err != nil {
			return 0, backends.Task{}, err
		}
		return vmid, d.tasks.Start("qmclone", vmid, func(context.Context) error { return nil }), nil
	}
	return vmid, d.task(ctx, "qmclone", vmid, func(ctx context.Context) error {
		l := d.lock(vmid)
		l.Lock()
		defer l.Unlock()
		return build(ctx)
	}), nil
}

// populate writes a new VM's files: its disk (overlay, copy or empty) and,
// for a full clone of a kernel template, its own kernel and initrd.
func (d *Driver) populate(ctx context.Context, c *vmConfig, t template, full bool) error {
	dir := d.l.vmDir(c.VMID)
	disk0 := filepath.Join(dir, "disk0.qcow2")
	switch {
	case t.Disk != "" && full:
		if err := d.qemuImg(ctx, "convert", "-O", "qcow2", t.path(t.Disk), disk0); err != nil {
			return err
		}
	case t.Disk != "":
		format, err := d.imageFormat(ctx, t.path(t.Disk))
		if err != nil {
			return err
		}
		if err := d.qemuImg(ctx, "create", "-q", "-f", "qcow2", "-F", format, "-b", t.path(t.Disk), disk0); err != nil {
			return err
		}
	default:
		if err := d.qemuImg(ctx, "create", "-q", "-f", "qcow2", disk0, strconv.Itoa(t.DiskGB)+"G"); err != nil {
			return err
		}
	}
	if full && t.Kernel != "" {
		for _, f := range []*string{&c.Kernel, &c.Initrd} {
			if *f == "" {
				continue
			}
			dst := filepath.Join(dir, filepath.Base(*f))
			if err := copyFile(*f, dst); err != nil {
				return err
			}
			*f = dst
		}
	}
	if c.Firmware == "uefi" {
		if err := copyFile(d.opts.OVMFVars, filepath.Join(dir, "efivars.fd")); err != nil {
			return fmt.Errorf("uefi variables: %w (install Debian's ovmf package)", err)
		}
	}
	return nil
}

// reserve allocates the next vmid and its directory, refusing a name that
// another VM or a template already has.
func (d *Driver) reserve(name string) (int, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := 100
	tpls, _ := loadTemplates(d.l.templates())
	taken := map[int]bool{}
	for _, t := range tpls {
		taken[t.VMID] = true
		if t.Name == name {
			return 0, "", fmt.Errorf("name %q: %w: it is a template", name, backends.ErrExists)
		}
	}
	for _, id := range d.vmids() {
		if c, err := readVMConfig(d.l.vmConfig(id)); err == nil && c.Name == name {
			return 0, "", fmt.Errorf("name %q: %w as vmid %d", name, backends.ErrExists, id)
		}
		if id >= next {
			next = id + 1
		}
	}
	for ; ; next++ {
		if taken[next] {
			continue
		}
		dir := d.l.vmDir(next)
		if err := os.Mkdir(dir, 0o755); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return 0, "", err
		}
		return next, dir, nil
	}
}

// Start boots a VM; starting a running VM succeeds.
func (d *Driver) Start(ctx context.Context, vmid int) (backends.Task, error) {
	c, err := d.config(vmid)
	if err != nil {
		return backends.Task{}, err
	}
	if c.Network != "" {
		if err := requireVDE(c.Network); err != nil {
			return backends.Task{}, fmt.Errorf("vmid %d: %w", vmid, err)
		}
	}
	return d.task(ctx, "qmstart", vmid, func(ctx context.Context) error {
		l := d.lock(vmid)
		l.Lock()
		defer l.Unlock()
		return d.start(ctx, vmid, "")
	}), nil
}

// start launches a stopped VM; the caller holds its lock.
func (d *Driver) start(ctx context.Context, vmid int, loadvm string) error {
	c, err := d.config(vmid)
	if err != nil {
		return err
	}
	switch c.Lock {
	case "":
	case "clone":
		// The lock outlives a poligon that died mid-copy: say so, since
		// nothing will ever finish that copy.
		return fmt.Errorf("vmid %d is locked: its full clone has not finished; if no clone of it is running (a restart of poligon interrupts one), the copy is incomplete: destroy the VM and clone again", vmid)
	default:
		return fmt.Errorf("vmid %d is locked (%s in progress)", vmid, c.Lock)
	}
	if d.alive(vmid) {
		return nil
	}
	return d.launch(ctx, c, loadvm)
}

// Stop shuts a VM down by ACPI and pulls the plug after StopGrace.
func (d *Driver) Stop(ctx context.Context, vmid int) (backends.Task, error) {
	if _, err := d.config(vmid); err != nil {
		return backends.Task{}, err
	}
	return d.task(ctx, "qmstop", vmid, func(ctx context.Context) error {
		l := d.lock(vmid)
		l.Lock()
		defer l.Unlock()
		return d.stop(ctx, vmid)
	}), nil
}

func (d *Driver) stop(ctx context.Context, vmid int) error {
	if gone, _ := d.end(ctx, vmid, d.opts.StopGrace, (*qmp.Client).SystemPowerdown); gone {
		return nil
	}
	d.log.InfoContext(ctx, "vm ignored ACPI shutdown, stopping it hard", "vmid", vmid, "grace", d.opts.StopGrace)
	return d.kill(ctx, vmid)
}

// Destroy stops a VM hard and removes it with its disks and sockets.
func (d *Driver) Destroy(ctx context.Context, vmid int) (backends.Task, error) {
	if _, err := d.template(vmid); err == nil {
		return backends.Task{}, fmt.Errorf("vmid %d is a template: remove its file from %s by hand", vmid, d.l.templates())
	}
	if _, err := d.config(vmid); err != nil {
		return backends.Task{}, err
	}
	return d.task(ctx, "qmdestroy", vmid, func(ctx context.Context) error {
		l := d.lock(vmid)
		l.Lock()
		defer l.Unlock()
		c, _ := d.config(vmid)
		if err := d.kill(ctx, vmid); err != nil {
			return err
		}
		if err := os.RemoveAll(d.l.vmDir(vmid)); err != nil {
			return err
		}
		if c.Network != "" {
			// The last VM on a network takes its switch and slirpvde along.
			if err := d.leaveNetwork(ctx, c.Network); err != nil {
				return fmt.Errorf("vmid %d destroyed, but stopping its network: %w", vmid, err)
			}
		}
		return nil
	}), nil
}

// task starts a background task (it outlives the call, as a PVE task
// does) whose lines keep the req of the call that started it.
func (d *Driver) task(ctx context.Context, typ string, vmid int, fn func(context.Context) error) backends.Task {
	req := logs.Req(ctx)
	return d.tasks.Start(typ, vmid, func(tctx context.Context) error {
		if req != "" {
			tctx = logs.WithReq(tctx, req)
		}
		return fn(tctx)
	})
}
