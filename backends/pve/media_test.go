package pve

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
)

func TestISOs(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	c.srv.AddISO("local:iso/alt-server-11.iso", 1<<30)
	b := c.backend(t, c.alice)
	ctx := testContext(t, 10*time.Second)
	want := []backends.ISO{{VolID: "local:iso/alt-server-11.iso", Size: 1 << 30},
		{VolID: "local:iso/debian-12.7.0-amd64-netinst.iso", Size: 661651456}}
	for _, storage := range []string{"", "local"} {
		isos, err := b.ISOs(ctx, storage)
		if err != nil || !reflect.DeepEqual(isos, want) {
			t.Errorf("ISOs(%q) = %+v, %v", storage, isos, err)
		}
	}
	if _, err := b.ISOs(ctx, "nfs-isos"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("ISOs of a missing storage = %v; want ErrNotFound", err)
	}
}

func TestCreateFromISOThenEjectResizeAddDisks(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 30*time.Second)
	iso := "local:iso/debian-12.7.0-amd64-netinst.iso"
	vmid, task, err := b.CreateFromISO(ctx, backends.ISORequest{Name: "alice-repro-inst", ISO: iso, DiskGB: 20,
		Disks: 2, MemMB: 2048, Cores: 2, UEFI: true, Pool: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	vm, ok := c.srv.VM(vmid)
	if !ok {
		t.Fatal("the server has no new VM")
	}
	wantCfg := map[string]string{
		"name": "alice-repro-inst", "memory": "2048", "cores": "2", "bios": "ovmf", "scsihw": "virtio-scsi-single",
		"net0": "virtio,bridge=vmbr0", "agent": "enabled=1", "boot": "order=scsi0;ide2", "ide2": iso + ",media=cdrom",
		"scsi0": "local-lvm:vm-" + strconv.Itoa(vmid) + "-disk-1,size=20G", "scsi1": "local-lvm:vm-" + strconv.Itoa(vmid) + "-disk-2,size=20G",
	}
	for k, v := range wantCfg {
		if vm.Config[k] != v {
			t.Errorf("config %s = %q; want %q", k, vm.Config[k], v)
		}
	}
	if !strings.Contains(vm.Config["efidisk0"], "efitype=4m") || vm.Pool != "alice" {
		t.Errorf("efidisk0 %q, pool %q", vm.Config["efidisk0"], vm.Pool)
	}
	if _, _, err := b.CreateFromISO(ctx, backends.ISORequest{Name: "alice-repro-inst", ISO: iso}); !errors.Is(err, backends.ErrExists) {
		t.Errorf("a second VM with the same name = %v; want ErrExists", err)
	}
	if _, _, err := b.CreateFromISO(ctx, backends.ISORequest{Name: "alice-repro-x", ISO: "local:iso/missing.iso"}); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("a missing ISO = %v; want ErrNotFound", err)
	}

	if err := b.Eject(ctx, vmid); err != nil {
		t.Fatal(err)
	}
	if vm, _ := c.srv.VM(vmid); vm.Config["ide2"] != "none,media=cdrom" {
		t.Errorf("after Eject ide2 = %q", vm.Config["ide2"])
	}

	if err := b.ResizeDisk(ctx, vmid, "disk0", 40); err != nil { // the local backend's name for scsi0
		t.Fatal(err)
	}
	if vm, _ := c.srv.VM(vmid); !strings.HasSuffix(vm.Config["scsi0"], "size=40G") {
		t.Errorf("after ResizeDisk scsi0 = %q", vm.Config["scsi0"])
	}
	if err := b.ResizeDisk(ctx, vmid, "scsi1", 10); err == nil || !strings.Contains(err.Error(), "cannot shrink") {
		t.Errorf("shrinking = %v; want a refusal", err)
	}
	if err := b.ResizeDisk(ctx, vmid, "scsi7", 10); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("resizing a missing disk = %v; want ErrNotFound", err)
	}
	c.srv.FailNextTask("resize", "resize failed: storage full")
	if err := b.ResizeDisk(ctx, vmid, "scsi1", 30); err == nil || !strings.Contains(err.Error(), "storage full") {
		t.Errorf("a failed resize task = %v; want its exit status", err)
	}

	names, err := b.AddDisks(ctx, vmid, 10, 2)
	if err != nil || !reflect.DeepEqual(names, []string{"scsi2", "scsi3"}) {
		t.Fatalf("AddDisks = %v, %v", names, err)
	}
	vm, _ = c.srv.VM(vmid)
	for _, n := range names {
		if !strings.HasPrefix(vm.Config[n], "local-lvm:vm-") || !strings.Contains(vm.Config[n], "size=10G") {
			t.Errorf("added disk %s = %q", n, vm.Config[n])
		}
	}
}
