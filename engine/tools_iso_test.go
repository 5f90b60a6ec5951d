package engine

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// TestISOTools drives the installer tools on the local backend: list, create
// (two disks, UEFI), eject, resize, add, destroy. The VM is not started: the
// tools act on its config and disks.
func TestISOTools(t *testing.T) {
	testvm.RequireQEMU(t)
	data := testvm.ShortTempDir(t)
	cfg := testConfig(t, data)
	_, cs := newServer(t, cfg)
	os.MkdirAll(filepath.Join(data, "isos"), 0o755)
	os.WriteFile(filepath.Join(data, "isos", "alt-p11-server.iso"), make([]byte, 4096), 0o644)
	os.WriteFile(filepath.Join(data, "isos", "debian-12.iso"), make([]byte, 2048), 0o644)

	if out := mustOK(t, cs, "iso_list", nil); out != "local:iso/alt-p11-server.iso\t4096\nlocal:iso/debian-12.iso\t2048\n" {
		t.Fatalf("iso_list = %q", out)
	}
	if out := mustOK(t, cs, "iso_list", map[string]any{"filter": "debian"}); out != "local:iso/debian-12.iso\t2048\n" {
		t.Fatalf("iso_list filter = %q", out)
	}
	mustRefuse(t, cs, "iso_list", map[string]any{"storage": "ceph"}, `storage "ceph"`)
	mustRefuse(t, cs, "vm_create_iso", map[string]any{"name": "inst", "iso": "local:iso/nosuch.iso"}, "hint: iso_list lists the images")
	mustRefuse(t, cs, "vm_create_iso", map[string]any{"name": "inst", "iso": "local:iso/debian-12.iso", "disks": 9}, "disks must be at most 8")

	out := mustOK(t, cs, "vm_create_iso", map[string]any{"name": "inst", "iso": "local:iso/debian-12.iso", "disks": 2, "disk_gb": 2, "uefi": true, "mem_mb": 256})
	m := regexp.MustCompile(`^vmid (\d+) tester-repro-inst on local`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("vm_create_iso = %q", out)
	}
	vmid := atoi(t, m[1])
	mustRefuse(t, cs, "vm_create_iso", map[string]any{"name": "inst", "iso": "local:iso/debian-12.iso"}, "already exists")
	conf, _ := os.ReadFile(filepath.Join(data, "vms", m[1], "vm.toml"))
	for _, want := range []string{`firmware = "uefi"`, `memory_mb = 256`, "debian-12.iso", `name = "disk1"`} {
		if !strings.Contains(string(conf), want) {
			t.Fatalf("vm.toml misses %q:\n%s", want, conf)
		}
	}
	mustOK(t, cs, "vm_eject", map[string]any{"vmid": vmid})
	if conf, _ := os.ReadFile(filepath.Join(data, "vms", m[1], "vm.toml")); strings.Contains(string(conf), "debian-12.iso") {
		t.Fatalf("the ISO is still in the config after vm_eject:\n%s", conf)
	}
	if out := mustOK(t, cs, "vm_disk_resize", map[string]any{"vmid": vmid, "size_gb": 5}); out != "ok: vmid "+m[1]+" scsi0 is 5 GB" {
		t.Fatalf("vm_disk_resize = %q", out)
	}
	mustRefuse(t, cs, "vm_disk_resize", map[string]any{"vmid": vmid, "size_gb": 1}, "shrinking")
	if out := mustOK(t, cs, "vm_disk_add", map[string]any{"vmid": vmid, "size_gb": 1, "count": 2}); out != "ok: vmid "+m[1]+" added disk2, disk3 (1 GB each)" {
		t.Fatalf("vm_disk_add = %q", out)
	}
	mustOK(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50})
	if _, err := os.Stat(filepath.Join(data, "vms", m[1])); !os.IsNotExist(err) {
		t.Fatalf("the VM's files are still there: %v", err)
	}
}
