package qemu

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/testvm"
)

// A VM that stops by itself (here its QEMU is killed) must not keep
// serving its cached console: its last frame is stale and input would wait
// for a reconnect that never comes.
func TestConsoleOfAVMThatDied(t *testing.T) {
	d := newDriver(t, testvm.DataDir(t))
	vmid := bootTiny(t, d, "x-repro-dies")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := d.Console(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Frame(ctx); err != nil {
		t.Fatal(err)
	}
	pid, ok := d.pid(vmid)
	if !ok {
		t.Fatal("no qemu process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitGone(ctx, pid, 30*time.Second) {
		t.Fatalf("qemu pid %d did not die of SIGKILL", pid)
	}
	if _, err := d.Console(ctx, vmid); !errors.Is(err, backends.ErrNotRunning) {
		t.Fatalf("console of a VM whose QEMU died: err = %v, want ErrNotRunning", err)
	}
	if n := d.Consoles(); n != 0 {
		t.Errorf("%d consoles still open after the VM died", n)
	}
}
