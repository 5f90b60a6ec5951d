package qemu

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/internal/testvm"
)

// blockDevices answers the VM's block devices by id, as QEMU sees them.
func blockDevices(t *testing.T, d *Driver, vmid int) map[string]qmp.BlockInfo {
	t.Helper()
	ctx := context.Background()
	var infos []qmp.BlockInfo
	if err := d.monitorDo(ctx, vmid, func(m *qmp.Client) (err error) { infos, err = m.QueryBlock(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	out := map[string]qmp.BlockInfo{}
	for _, b := range infos {
		out[b.ID()] = b
	}
	return out
}

// TestISOVM makes an installer VM (a non-bootable ISO: the firmware says so
// on the screen), with two disks, then ejects the CD, grows a disk and
// hot-plugs two more while it runs.
func TestISOVM(t *testing.T) {
	testvm.RequireQEMU(t)
	for _, uefi := range []bool{false, true} {
		name := "bios"
		if uefi {
			name = "uefi"
			if _, err := os.Stat("/usr/share/OVMF/OVMF_CODE_4M.fd"); err != nil {
				t.Log("no OVMF (Debian's ovmf package): skipping the UEFI case")
				continue
			}
		}
		t.Run(name, func(t *testing.T) {
			data := testvm.ShortTempDir(t)
			// Nothing in the VM answers ACPI: stop pulls the plug after the grace.
			d, err := New(Options{DataDir: data, StopGrace: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			ctx := context.Background()
			iso := make([]byte, 1<<20)
			rand.Read(iso)
			os.WriteFile(filepath.Join(data, "isos", "installer.iso"), iso, 0o644)
			os.WriteFile(filepath.Join(data, "isos", "notes.txt"), []byte("not an ISO"), 0o644)

			isos, err := d.ISOs(ctx, "")
			if err != nil || len(isos) != 1 || isos[0].VolID != "local:iso/installer.iso" || isos[0].Size != 1<<20 {
				t.Fatalf("ISOs = %+v, %v", isos, err)
			}
			if _, _, err := d.CreateFromISO(ctx, backends.ISORequest{Name: "x-repro-i", ISO: "local:iso/nosuch.iso", DiskGB: 1, Disks: 1, MemMB: 128, Cores: 1}); !errors.Is(err, backends.ErrNotFound) {
				t.Fatalf("a missing ISO: err = %v", err)
			}
			if _, _, err := d.CreateFromISO(ctx, backends.ISORequest{Name: "x-repro-i", ISO: "local:iso/../../etc/passwd", DiskGB: 1, Disks: 1, MemMB: 128, Cores: 1}); err == nil {
				t.Fatal("an ISO path outside isos/ was accepted")
			}
			vmid, task, err := d.CreateFromISO(ctx, backends.ISORequest{Name: "x-repro-" + name, ISO: "local:iso/installer.iso", DiskGB: 2, Disks: 2, MemMB: 128, Cores: 1, UEFI: uefi})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, d, task)
			destroyLater(t, d, vmid)
			task, _ = d.Start(ctx, vmid)
			wait(t, d, task)

			devs := blockDevices(t, d, vmid)
			if cd := devs["cd0"]; cd.Inserted == nil || !strings.HasSuffix(cd.Inserted.File, "installer.iso") {
				t.Fatalf("the CD: %+v", cd)
			}
			if devs["disk0-dev"].Inserted == nil || devs["disk1-dev"].Inserted == nil {
				t.Fatalf("two disks wanted: %v", devs)
			}
			// The firmware finds nothing to boot: it draws that on the
			// console (UEFI switches to a graphics mode first).
			s, err := d.Console(ctx, vmid)
			if err != nil {
				t.Fatal(err)
			}
			if uefi {
				deadline := time.Now().Add(2 * time.Minute)
				for {
					img, _, _ := s.Frame(ctx)
					if img != nil && img.Bounds().Dx() > 720 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("OVMF never switched to graphics: the frame is %v", img.Bounds())
					}
					time.Sleep(500 * time.Millisecond)
				}
			}

			if err := d.Eject(ctx, vmid); err != nil {
				t.Fatal(err)
			}
			if cd := blockDevices(t, d, vmid)["cd0"]; cd.Inserted != nil {
				t.Fatalf("the CD is still in after eject: %+v", cd.Inserted)
			}
			if err := d.ResizeDisk(ctx, vmid, "scsi1", 3); err != nil {
				t.Fatal(err)
			}
			if sz := blockDevices(t, d, vmid)["disk1-dev"].Inserted.Image.VirtualSize; sz != 3<<30 {
				t.Fatalf("disk1 is %d bytes after a resize to 3 GB", sz)
			}
			if err := d.ResizeDisk(ctx, vmid, "disk1", 1); err == nil {
				t.Fatal("a shrink was accepted")
			}
			if err := d.ResizeDisk(ctx, vmid, "disk7", 9); err == nil || !strings.Contains(err.Error(), "has no disk") {
				t.Fatalf("an unknown disk: %v", err)
			}
			names, err := d.AddDisks(ctx, vmid, 1, 2)
			if err != nil || strings.Join(names, ",") != "disk2,disk3" {
				t.Fatalf("AddDisks = %v, %v", names, err)
			}
			devs = blockDevices(t, d, vmid)
			if devs["disk2-dev"].Inserted == nil || devs["disk3-dev"].Inserted == nil {
				t.Fatalf("hot-plugged disks are missing: %v", devs)
			}

			// Stopped and started again, the VM has what the calls made.
			task, _ = d.Stop(ctx, vmid)
			wait(t, d, task)
			task, _ = d.Start(ctx, vmid)
			wait(t, d, task)
			devs = blockDevices(t, d, vmid)
			if devs["cd0"].Inserted != nil || devs["disk3-dev"].Inserted == nil || devs["disk1-dev"].Inserted.Image.VirtualSize != 3<<30 {
				t.Fatalf("after a restart: %v", devs)
			}
		})
	}
}
