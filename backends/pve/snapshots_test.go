package pve

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
)

func TestSnapshotAndRollback(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 30*time.Second)
	vmid := cloneVM(t, b, "alice-repro-snap")

	task, err := b.Snapshot(ctx, vmid, "clean") // stopped: disks only
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	startVM(t, b, vmid)
	task, err = b.Snapshot(ctx, vmid, "booted") // running: with RAM
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	names, err := b.ListSnapshots(ctx, vmid)
	if err != nil || !reflect.DeepEqual(names, []string{"clean", "booted"}) {
		t.Fatalf("ListSnapshots = %v, %v; want [clean booted] without current", names, err)
	}

	stop, err := b.Stop(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, stop)
	task, err = b.Rollback(ctx, vmid, "clean") // a disk-only snapshot: start=1 runs it after
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	if vm, _ := b.VM(ctx, vmid); vm.Status != "running" {
		t.Errorf("after Rollback the VM is %q; want running", vm.Status)
	}

	if _, err := b.Rollback(ctx, vmid, "nope"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Rollback to a missing snapshot = %v; want ErrNotFound", err)
	}
	if _, err := b.Snapshot(ctx, vmid, "clean"); !errors.Is(err, backends.ErrExists) {
		t.Errorf("a second snapshot named clean = %v; want ErrExists", err)
	}
	var ae *APIError
	if _, err := b.Snapshot(ctx, vmid, "1 bad name"); !errors.As(err, &ae) || ae.Params["snapname"] == "" {
		t.Errorf("a bad snapshot name = %v; want PVE's parameter error on snapname", err)
	}
}
