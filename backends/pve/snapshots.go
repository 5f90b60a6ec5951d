package pve

import (
	"context"
	"fmt"
	"net/url"

	"github.com/poligon/poligon/backends"
)

// Snapshot saves the VM's disks, and its RAM (vmstate=1) when it runs, so
// a rollback resumes the running machine.
func (b *Backend) Snapshot(ctx context.Context, vmid int, name string) (backends.Task, error) {
	var task backends.Task
	err := b.withVM(ctx, vmid, func(node string) error {
		st, err := b.status(ctx, node, vmid)
		if err != nil {
			return err
		}
		body := map[string]any{"snapname": name, "vmstate": b2i(st.Status == "running")}
		task, err = b.vmTask(ctx, node, vmid, "snapshot vmid", "/snapshot", body)
		return err
	})
	return task, err
}

// Rollback restores a snapshot with start=1, so the VM runs afterwards
// (PVE resumes it from the saved RAM when the snapshot has it).
func (b *Backend) Rollback(ctx context.Context, vmid int, name string) (backends.Task, error) {
	var task backends.Task
	err := b.withVM(ctx, vmid, func(node string) error {
		var err error
		task, err = b.vmTask(ctx, node, vmid, "roll back vmid", "/snapshot/"+url.PathEscape(name)+"/rollback",
			map[string]any{"start": 1})
		return err
	})
	if err != nil {
		return backends.Task{}, fmt.Errorf("%w (snapshot %q)", err, name)
	}
	return task, nil
}

// ListSnapshots answers the snapshot names, oldest first as PVE lists
// them, without PVE's "current" pseudo-entry.
func (b *Backend) ListSnapshots(ctx context.Context, vmid int) ([]string, error) {
	var names []string
	err := b.withVM(ctx, vmid, func(node string) error {
		var list []struct {
			Name string `json:"name"`
		}
		if err := b.get(ctx, fmt.Sprintf("list the snapshots of vmid %d", vmid), vmPath(node, vmid)+"/snapshot", nil, &list); err != nil {
			return err
		}
		names = names[:0]
		for _, s := range list {
			if s.Name != "current" {
				names = append(names, s.Name)
			}
		}
		return nil
	})
	return names, err
}
