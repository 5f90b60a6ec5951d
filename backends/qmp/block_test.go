package qmp

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func findBlock(t *testing.T, c *Client, id string) BlockInfo {
	t.Helper()
	blocks, err := c.QueryBlock(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.ID() == id {
			return b
		}
	}
	t.Fatalf("no block device %q in %+v", id, blocks)
	return BlockInfo{}
}

func TestCDChangeMediumAndEject(t *testing.T) {
	c := startQEMU(t, "-device", "ide-cd,id=cd0").dial(t)
	ctx := testContext(t)
	iso := filepath.Join(t.TempDir(), "install.iso")
	if err := os.WriteFile(iso, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	cd := findBlock(t, c, "cd0")
	if !cd.Removable || cd.Inserted != nil {
		t.Fatalf("empty CD drive: %+v", cd)
	}

	since := time.Now()
	if err := c.BlockdevChangeMedium(ctx, "cd0", iso, "raw"); err != nil {
		t.Fatal(err)
	}
	cd = findBlock(t, c, "cd0")
	if cd.Inserted == nil || cd.Inserted.File != iso || !cd.Inserted.ReadOnly || cd.TrayOpen {
		t.Fatalf("after change: %+v (medium %+v)", cd, cd.Inserted)
	}
	if _, err := c.WaitEvent(ctx, "DEVICE_TRAY_MOVED", since); err != nil {
		t.Fatal(err)
	}

	if err := c.Eject(ctx, "cd0", true); err != nil {
		t.Fatal(err)
	}
	// The medium is gone. The tray is left open, but the guest may close it
	// again (SeaBIOS, probing its boot devices, loads the drive): not ours
	// to check.
	if cd = findBlock(t, c, "cd0"); cd.Inserted != nil {
		t.Fatalf("after eject: %+v", cd)
	}

	if err := c.BlockdevChangeMedium(ctx, "cd9", iso, "raw"); errorClass(err) == "" {
		t.Fatalf("changing the medium of a missing drive: got %v, want a QMP error", err)
	}
}

func TestBlockResize(t *testing.T) {
	c := startQEMU(t, qcow2Disk(t, "64M")...).dial(t)
	disk := findBlock(t, c, "vd0")
	if disk.Inserted == nil || disk.Inserted.NodeName != "disk0" || disk.Inserted.Driver != "qcow2" ||
		disk.Inserted.Image.VirtualSize != 64<<20 {
		t.Fatalf("disk: %+v (medium %+v)", disk, disk.Inserted)
	}
	if err := c.BlockResize(testContext(t), "disk0", 128<<20); err != nil {
		t.Fatal(err)
	}
	if size := findBlock(t, c, "vd0").Inserted.Image.VirtualSize; size != 128<<20 {
		t.Fatalf("size after resize %d, want %d", size, 128<<20)
	}
}

func TestBlockInfoID(t *testing.T) {
	for qdev, want := range map[string]string{
		"cd0":                                    "cd0",
		"/machine/peripheral/vd0/virtio-backend": "vd0",
		"/machine/peripheral-anon/device[0]/virtio-backend": "/machine/peripheral-anon/device[0]/virtio-backend",
	} {
		if got := (BlockInfo{Qdev: qdev}).ID(); got != want {
			t.Errorf("ID of %q = %q, want %q", qdev, got, want)
		}
	}
}
