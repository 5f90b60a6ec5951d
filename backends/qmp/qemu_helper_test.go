package qmp

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

type testVM struct {
	sock   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when QEMU has exited
}

// startQEMU boots a bare QEMU (no disk, no OS: the firmware idles) with QMP on
// a unix socket plus extra arguments, and kills it when the test ends. It skips
// the test when QEMU is not installed.
func startQEMU(t testing.TB, extra ...string) *testVM {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86): skipping a test that needs a real QEMU")
	}
	vm := &testVM{dir: shortTempDir(t), exited: make(chan struct{})}
	vm.sock = filepath.Join(vm.dir, "qmp.sock")
	args := append([]string{"-nodefaults", "-machine", "pc", "-accel", "tcg", "-m", "64", "-display", "none",
		"-qmp", "unix:" + vm.sock + ",server=on,wait=off"}, extra...)
	vm.cmd = exec.Command(bin, args...)
	vm.cmd.Stderr = &testLog{t: t}
	if err := vm.cmd.Start(); err != nil {
		t.Fatalf("starting QEMU: %v", err)
	}
	go func() {
		vm.cmd.Wait()
		close(vm.exited)
	}()
	t.Cleanup(func() {
		vm.cmd.Process.Kill()
		<-vm.exited
	})
	return vm
}

// dial connects to the VM's QMP socket once QEMU listens on it, and closes the
// client at the end of the test.
func (vm *testVM) dial(t testing.TB) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := Dial(ctx, vm.sock)
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		select {
		case <-vm.exited:
			t.Fatalf("QEMU exited: %v", vm.cmd.ProcessState)
		case <-ctx.Done():
			t.Fatalf("QMP socket never answered: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// qcow2Disk makes a qcow2 image and answers the QEMU arguments that attach it
// as node disk0 (on file node file0) to virtio-blk device vd0, the way the
// QEMU driver does.
func qcow2Disk(t testing.TB, size string) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", path, size).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	return []string{
		"-blockdev", "driver=file,filename=" + path + ",node-name=file0",
		"-blockdev", "driver=qcow2,file=file0,node-name=disk0",
		"-device", "virtio-blk-pci,drive=disk0,id=vd0",
	}
}

// shortTempDir makes a directory for unix sockets, whose paths must stay under
// 108 bytes (t.TempDir can be longer).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func errorClass(err error) string {
	var qe *Error
	if errors.As(err, &qe) {
		return qe.Class
	}
	return ""
}

// testLog passes a child's stderr to the test log.
type testLog struct{ t testing.TB }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Logf("qemu: %s", p)
	return len(p), nil
}
