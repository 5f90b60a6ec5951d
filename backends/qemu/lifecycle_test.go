package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/testvm"
)

// A full clone whose copy was cut short (poligon restarted mid-copy) keeps
// lock = "clone" for ever: starting it is refused with what to do, and
// destroying it works. QEMU is "false": nothing boots even if Start let it.
func TestInterruptedFullClone(t *testing.T) {
	d := newDriver(t, testvm.ShortTempDir(t))
	d.opts.QEMU = "false"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vmid := 100
	if err := os.MkdirAll(d.l.vmDir(vmid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.l.vmDir(vmid), "disk0.qcow2"), []byte("QFI\xfb half a copy"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := vmConfig{
		VMID: vmid, Name: "x-repro-half", Template: "tiny", MemoryMB: 64, Cores: 1,
		Disks: []disk{{Name: "disk0", File: "disk0.qcow2"}}, Lock: "clone",
	}
	if err := c.write(d.l.vmConfig(vmid)); err != nil {
		t.Fatal(err)
	}

	task, err := d.Start(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.WaitTask(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vmid 100 is locked", "a restart of poligon interrupts one", "destroy the VM and clone again"} {
		if !st.Failed() || !strings.Contains(st.ExitStatus, want) {
			t.Errorf("start of a half-cloned VM: %q, want a refusal saying %q", st.ExitStatus, want)
		}
	}

	task, err = d.Destroy(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := d.WaitTask(ctx, task.ID); err != nil || st.Failed() {
		t.Fatalf("destroy of a half-cloned VM: %+v, %v", st, err)
	}
	if _, err := os.Stat(d.l.vmDir(vmid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind (%v)", d.l.vmDir(vmid), err)
	}
	if _, err := d.VM(ctx, vmid); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("destroyed VM: err = %v", err)
	}
}
