package qmp

import (
	"errors"
	"strings"
	"testing"
)

// The disk layout the QEMU driver uses: a qcow2 -blockdev node disk0 holding
// both the disk snapshot and the VM state.
func TestSnapshotSaveLoadDelete(t *testing.T) {
	c := startQEMU(t, qcow2Disk(t, "64M")...).dial(t)
	ctx := testContext(t)
	disk := []string{"disk0"}

	if err := c.SnapshotSave(ctx, "one", "disk0", disk); err != nil {
		t.Fatal(err)
	}
	snaps := diskSnapshots(t, c)
	if len(snaps) != 1 || snaps[0].Name != "one" || snaps[0].VMStateSize == 0 {
		t.Fatalf("snapshots after save: %+v", snaps)
	}
	expectStatus(t, c, "running")

	var jobErr *JobError
	err := c.SnapshotSave(ctx, "one", "disk0", disk)
	if !errors.As(err, &jobErr) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("saving over an existing tag: got %v", err)
	}

	// A paused VM stays paused through save and load.
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.SnapshotSave(ctx, "two", "disk0", disk); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, c, "paused")
	if err := c.SnapshotLoad(ctx, "one", "disk0", disk); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, c, "paused")
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}

	// A running VM keeps running through load.
	if err := c.SnapshotLoad(ctx, "two", "disk0", disk); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, c, "running")

	// A failed load leaves the VM stopped in restore-vm; cont resumes it.
	err = c.SnapshotLoad(ctx, "nope", "disk0", disk)
	if !errors.As(err, &jobErr) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("loading an unknown tag: got %v", err)
	}
	expectStatus(t, c, "restore-vm")
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, c, "running")

	// The vmstate node must be the qcow2 node.
	if err := c.SnapshotSave(ctx, "three", "file0", disk); !errors.As(err, &jobErr) {
		t.Fatalf("vmstate on the file node: got %v", err)
	}

	for _, tag := range []string{"one", "two"} {
		if err := c.SnapshotDelete(ctx, tag, disk); err != nil {
			t.Fatal(err)
		}
	}
	if snaps := diskSnapshots(t, c); len(snaps) != 0 {
		t.Fatalf("snapshots after delete: %+v", snaps)
	}
	if jobs, err := c.QueryJobs(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs left behind: %+v, %v", jobs, err)
	}
}

func diskSnapshots(t *testing.T, c *Client) []SnapshotInfo {
	t.Helper()
	blocks, err := c.QueryBlock(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Inserted != nil && b.Inserted.NodeName == "disk0" {
			return b.Inserted.Image.Snapshots
		}
	}
	t.Fatalf("no disk0 in %+v", blocks)
	return nil
}

func expectStatus(t *testing.T, c *Client, want string) {
	t.Helper()
	st, err := c.QueryStatus(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != want {
		t.Fatalf("status %q, want %q", st.Status, want)
	}
}
