package hostapi

import (
	"context"
	"errors"
	"time"

	"github.com/poligon/poligon/backends"
)

func (c *Caller) media() (backends.Media, error) {
	return backends.As[backends.Media](c.be, "installer media")
}

// ISOs lists the installer images of a storage ("" = the default).
func (c *Caller) ISOs(ctx context.Context, storage string) ([]backends.ISO, error) {
	m, err := c.media()
	if err != nil {
		return nil, err
	}
	isos, err := m.ISOs(ctx, storage)
	return isos, wrap(err, "", "list ISOs")
}

// ISOVM asks for a VM that boots from an installer ISO.
type ISOVM struct {
	Name                        string
	ISO                         string
	DiskGB, Disks, MemMB, Cores int
	UEFI                        bool
	Pool, Storage               string
}

// CreateFromISO creates <owner>-repro-<name> with empty disks and the ISO in
// its CD drive. The task is waited for briefly (creation is quick).
func (c *Caller) CreateFromISO(ctx context.Context, req ISOVM) (CloneResult, error) {
	m, err := c.media()
	if err != nil {
		return CloneResult{}, err
	}
	pool, err := c.pickPool(req.Pool)
	if err != nil {
		return CloneResult{}, err
	}
	name := c.VMName(req.Name)
	vmid, task, err := m.CreateFromISO(ctx, backends.ISORequest{
		Name: name, ISO: req.ISO, DiskGB: req.DiskGB, Disks: req.Disks, MemMB: req.MemMB,
		Cores: req.Cores, UEFI: req.UEFI, Pool: pool, Storage: req.Storage,
	})
	switch {
	case errors.Is(err, backends.ErrExists):
		return CloneResult{}, wrap(err, "pick another name, or use the existing VM (vm_list_my_vms)", "")
	case errors.Is(err, backends.ErrNotFound):
		return CloneResult{}, wrap(err, "iso_list lists the images", "")
	case err != nil:
		return CloneResult{}, wrap(err, "", "create %s", name)
	}
	res := CloneResult{VMID: vmid, Name: name}
	if vm, err := c.be.(backends.Lifecycle).VM(ctx, vmid); err == nil {
		res.Node = vm.Node
	}
	res.Task, err = c.waitTask(ctx, task.ID, 30*time.Second)
	return res, err
}

// withMedia runs fn with the media capability under the VM's lock.
func (v *VM) withMedia(ctx context.Context, fn func(backends.Media) error) error {
	m, err := v.c.media()
	if err != nil {
		return err
	}
	return fn(m)
}

// Eject empties the VM's CD drive.
func (v *VM) Eject(ctx context.Context) error {
	return v.withMedia(ctx, func(m backends.Media) error {
		return wrap(m.Eject(ctx, v.info.VMID), "", "vmid %d eject", v.info.VMID)
	})
}

// ResizeDisk grows a disk to sizeGB.
func (v *VM) ResizeDisk(ctx context.Context, disk string, sizeGB int) error {
	return v.withMedia(ctx, func(m backends.Media) error {
		return wrap(m.ResizeDisk(ctx, v.info.VMID, disk, sizeGB), "disks only grow; vm_exec lsblk shows them", "vmid %d resize %s", v.info.VMID, disk)
	})
}

// AddDisks adds count empty disks of sizeGB.
func (v *VM) AddDisks(ctx context.Context, sizeGB, count int) ([]string, error) {
	var names []string
	err := v.withMedia(ctx, func(m backends.Media) (err error) {
		names, err = m.AddDisks(ctx, v.info.VMID, sizeGB, count)
		return wrap(err, "", "vmid %d add disks", v.info.VMID)
	})
	return names, err
}
