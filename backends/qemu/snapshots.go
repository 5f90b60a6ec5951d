package qemu

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
)

// snapshotName is what Proxmox accepts too, so a name works on both.
var snapshotName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,39}$`)

// Snapshot saves a VM's disks, and its memory when it runs (so a rollback
// resumes exactly where it was), as internal qcow2 snapshots.
func (d *Driver) Snapshot(ctx context.Context, vmid int, name string) (backends.Task, error) {
	c, err := d.snapshotTarget(ctx, vmid, name)
	if err != nil {
		return backends.Task{}, err
	}
	if names, _ := d.ListSnapshots(ctx, vmid); slices.Contains(names, name) {
		return backends.Task{}, fmt.Errorf("vmid %d: snapshot %q %w", vmid, name, backends.ErrExists)
	}
	return d.task(ctx, "qmsnapshot", vmid, func(ctx context.Context) error {
		l := d.lock(vmid)
		l.Lock()
		defer l.Unlock()
		if d.alive(vmid) {
			return d.monitorDo(ctx, vmid, func(m *qmp.Client) error {
				return m.SnapshotSave(ctx, name, c.Disks[0].Name, c.diskNames())
			})
		}
		for _, dk := range c.Disks {
			if err := d.qemuImg(ctx, "snapshot", "-c", name, c.diskPath(d.l.vmDir(vmid), dk)); err != nil {
				return err
			}
		}
		return nil
	}), nil
}

// Rollback restores a snapshot and leaves the VM running.
func (d *Driver) Rollback(ctx context.Context, vmid int, name string) (backends.Task, error) {
	c, err := d.snapshotTarget(ctx, vmid, name)
	if err != nil {
		return backends.Task{}, err
	}
	info, err := d.imageInfo(ctx, c.diskPath(d.l.vmDir(vmid), c.Disks[0]))
	if err != nil {
		return backends.Task{}, err
	}
	i := slices.IndexFunc(info.Snapshots, func(s snapshotInfo) bool { return s.Name == name })
	if i < 0 {
		return backends.Task{}, fmt.Errorf("vmid %d: snapshot %q: %w", vmid, name, backends.ErrNotFound)
	}
	withMemory := info.Snapshots[i].VMStateSize > 0
	return d.task(ctx, "qmrollback", vmid, func(ctx context.Context) error {
		l := d.lock(vmid)
		l.Lock()
		defer l.Unlock()
		if withMemory {
			if d.alive(vmid) {
				return d.monitorDo(ctx, vmid, func(m *qmp.Client) error {
					err := m.SnapshotLoad(ctx, name, c.Disks[0].Name, c.diskNames())
					// A failed load leaves the VM stopped in restore-vm:
					// resume it either way.
					if cerr := m.Cont(ctx); err == nil {
						err = cerr
					}
					return err
				})
			}
			return d.start(ctx, vmid, name)
		}
		// A disk-only snapshot (taken while stopped) is restored offline.
		if err := d.stop(ctx, vmid); err != nil {
			return err
		}
		for _, dk := range c.Disks {
			if err := d.qemuImg(ctx, "snapshot", "-a", name, c.diskPath(d.l.vmDir(vmid), dk)); err != nil {
				return err
			}
		}
		return d.start(ctx, vmid, "")
	}), nil
}

// ListSnapshots answers the snapshot names of the VM's first disk.
func (d *Driver) ListSnapshots(ctx context.Context, vmid int) ([]string, error) {
	c, err := d.config(vmid)
	if err != nil {
		return nil, err
	}
	if len(c.Disks) == 0 {
		return nil, nil
	}
	info, err := d.imageInfo(ctx, c.diskPath(d.l.vmDir(vmid), c.Disks[0]))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(info.Snapshots))
	for i, s := range info.Snapshots {
		names[i] = s.Name
	}
	return names, nil
}

func (d *Driver) snapshotTarget(ctx context.Context, vmid int, name string) (vmConfig, error) {
	if !snapshotName.MatchString(name) {
		return vmConfig{}, fmt.Errorf("snapshot name %q: start with a letter, then letters, digits, _ or - (at most 40)", name)
	}
	c, err := d.config(vmid)
	if err != nil {
		return c, err
	}
	if len(c.Disks) == 0 {
		return c, fmt.Errorf("vmid %d has no disk to hold a snapshot", vmid)
	}
	return c, nil
}
