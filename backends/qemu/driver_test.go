package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"image"
	"image/png"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/internal/testvm"
)

const tinyVMID = 9000

func newDriver(t *testing.T, data string) *Driver {
	t.Helper()
	d, err := New(Options{DataDir: data, StopGrace: 20 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// testLogger sends the driver's lines to the test's log, shown when it fails.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// wait blocks on a task and fails the test when it fails.
func wait(t *testing.T, d *Driver, task backends.Task) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := d.WaitTask(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running {
		t.Fatalf("task %s still running after 3 minutes", task.ID)
	}
	if st.Failed() {
		t.Fatalf("task %s failed: %s", task.ID, st.ExitStatus)
	}
}

// bootTiny clones tiny, starts it and waits for its agent; the VM is
// destroyed when the test ends.
func bootTiny(t *testing.T, d *Driver, name string) int {
	t.Helper()
	ctx := context.Background()
	vmid, task, err := d.Clone(ctx, backends.CloneRequest{Template: tinyVMID, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, d, task)
	destroyLater(t, d, vmid)
	task, err = d.Start(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, d, task)
	waitAgent(t, d, vmid)
	return vmid
}

// destroyLater destroys vmid when the test ends.
func destroyLater(t *testing.T, d *Driver, vmid int) {
	t.Cleanup(func() {
		if task, err := d.Destroy(context.Background(), vmid); err == nil {
			d.WaitTask(context.Background(), task.ID)
		}
	})
}

func waitAgent(t *testing.T, d *Driver, vmid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := d.GuestPing(ctx, vmid)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("guest agent of vmid %d did not answer in 2 minutes: %v", vmid, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// sh runs a shell command in the guest and answers its status.
func sh(t *testing.T, d *Driver, vmid int, cmd string) backends.ExecStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pid, err := d.ExecStart(ctx, vmid, backends.ExecRequest{Path: "/bin/sh", Args: []string{"-c", cmd}})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	for {
		st, err := d.ExecStatus(ctx, vmid, pid)
		if err != nil {
			t.Fatalf("exec-status %q: %v", cmd, err)
		}
		if st.Exited {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTinyVM(t *testing.T) {
	data := testvm.DataDir(t)
	d := newDriver(t, data)
	vmid := bootTiny(t, d, "test-repro-tiny")
	ctx := context.Background()

	t.Run("status", func(t *testing.T) {
		vm, err := d.VM(ctx, vmid)
		if err != nil || vm.Status != "running" || vm.Name != "test-repro-tiny" || vm.Node != Node {
			t.Fatalf("VM = %+v, %v", vm, err)
		}
		vms, _ := d.VMs(ctx)
		if len(vms) != 1 || vms[0].VMID != vmid {
			t.Fatalf("VMs = %+v", vms)
		}
	})

	t.Run("exec", func(t *testing.T) {
		st := sh(t, d, vmid, "echo out; echo err >&2; exit 3")
		if string(st.Stdout) != "out\n" || string(st.Stderr) != "err\n" || st.ExitCode != 3 {
			t.Fatalf("exec = %+v (stdout %q stderr %q)", st, st.Stdout, st.Stderr)
		}
		st = sh(t, d, vmid, "printf 'привет ✓' | wc -c") // 6 two-byte letters, a space, a three-byte check mark
		if strings.TrimSpace(string(st.Stdout)) != "16" {
			t.Fatalf("non-ASCII command: stdout %q stderr %q", st.Stdout, st.Stderr)
		}
	})

	t.Run("file 1 MiB round trip", func(t *testing.T) {
		want := make([]byte, 1<<20)
		rand.Read(want)
		if err := d.WriteFile(ctx, vmid, "/tmp/blob", want); err != nil {
			t.Fatal(err)
		}
		got, size, err := d.ReadFile(ctx, vmid, "/tmp/blob", 0, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		if size != int64(len(want)) || !bytes.Equal(got, want) {
			t.Fatalf("read back %d of %d bytes, equal=%v", len(got), size, bytes.Equal(got, want))
		}
		win, _, err := d.ReadFile(ctx, vmid, "/tmp/blob", 1000, 10)
		if err != nil || !bytes.Equal(win, want[1000:1010]) {
			t.Fatalf("window read = %x, %v", win, err)
		}
	})

	t.Run("network", func(t *testing.T) {
		ifs, err := d.Interfaces(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		if !strings.Contains(strings.Join(names, " "), "lo") {
			t.Fatalf("interfaces = %v", names)
		}
	})

	t.Run("console frame equals screendump", func(t *testing.T) {
		s, err := d.Console(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		// Stop the guest so both see the same moment (the cursor blinks).
		pauseVM(t, d, vmid)
		defer resumeVM(t, d, vmid)
		var frame *image.RGBA
		var dump image.Image
		for attempt := 0; ; attempt++ {
			dump, err = d.Screendump(ctx, vmid)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // let the last update arrive
			frame, _, err = s.Frame(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := pixelDiff(frame, dump); diff == 0 {
				break
			} else if attempt == 5 {
				t.Fatalf("frame and screendump differ in %d pixels (frame %v, dump %v)", diff, frame.Bounds(), dump.Bounds())
			}
		}
	})

	t.Run("typing reaches the shell", func(t *testing.T) {
		s, err := d.Console(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Type(ctx, "echo hello-$((6*7)) > /tmp/typed"); err != nil {
			t.Fatal(err)
		}
		if err := s.Key(ctx, "ret"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			st := sh(t, d, vmid, "cat /tmp/typed 2>/dev/null")
			if strings.TrimSpace(string(st.Stdout)) == "hello-42" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/tmp/typed = %q, want hello-42", st.Stdout)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// What the shell echoed is on the screen too: tesseract reads it.
		// QEMU slows its screen updates when the screen is idle (up to 3 s
		// apart), so the frame may lag the shell a little: read it again.
		if _, err := exec.LookPath("tesseract"); err == nil {
			file := filepath.Join(t.TempDir(), "screen.png")
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
				img, _, err := s.Frame(ctx)
				if err != nil {
					t.Fatal(err)
				}
				f, _ := os.Create(file)
				png.Encode(f, img)
				f.Close()
				out, err := exec.Command("tesseract", file, "stdout").Output()
				if err == nil && strings.Contains(string(out), "echo hello") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("tesseract read %q (%v), want the typed command", out, err)
				}
			}
		} else {
			t.Log("tesseract not installed: the screen was not read by OCR")
		}
		if err := s.Key(ctx, "entr"); err == nil || !strings.Contains(err.Error(), "entr") {
			t.Fatalf("unknown key name: err = %v", err)
		}
	})

	t.Run("snapshot and rollback", func(t *testing.T) {
		sh(t, d, vmid, "echo before > /tmp/state")
		task, err := d.Snapshot(ctx, vmid, "clean")
		if err != nil {
			t.Fatal(err)
		}
		wait(t, d, task)
		if _, err := d.Snapshot(ctx, vmid, "clean"); !errors.Is(err, backends.ErrExists) {
			t.Fatalf("second snapshot with the same name: err = %v", err)
		}
		sh(t, d, vmid, "echo after > /tmp/state")
		task, err = d.Rollback(ctx, vmid, "clean")
		if err != nil {
			t.Fatal(err)
		}
		wait(t, d, task)
		waitAgent(t, d, vmid)
		if st := sh(t, d, vmid, "cat /tmp/state"); string(st.Stdout) != "before\n" {
			t.Fatalf("after rollback /tmp/state = %q", st.Stdout)
		}
		names, err := d.ListSnapshots(ctx, vmid)
		if err != nil || len(names) != 1 || names[0] != "clean" {
			t.Fatalf("snapshots = %v, %v", names, err)
		}
		if _, err := d.Rollback(ctx, vmid, "nosuch"); !errors.Is(err, backends.ErrNotFound) {
			t.Fatalf("rollback to a missing snapshot: err = %v", err)
		}
	})

	t.Run("a restarted driver finds the VM", func(t *testing.T) {
		d2 := newDriver(t, data)
		vm, err := d2.VM(ctx, vmid)
		if err != nil || vm.Status != "running" {
			t.Fatalf("VM = %+v, %v", vm, err)
		}
		if st := sh(t, d2, vmid, "echo again"); string(st.Stdout) != "again\n" {
			t.Fatalf("exec through a new driver = %q", st.Stdout)
		}
	})

	t.Run("stop by ACPI then destroy leaves nothing", func(t *testing.T) {
		pid, ok := d.pid(vmid)
		if !ok {
			t.Fatal("no qemu process")
		}
		task, err := d.Stop(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, d, task)
		if vm, _ := d.VM(ctx, vmid); vm.Status != "stopped" {
			t.Fatalf("after stop: status %s", vm.Status)
		}
		task, err = d.Destroy(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, d, task)
		if !processGone(pid) {
			t.Errorf("qemu pid %d is still running", pid)
		}
		for _, p := range []string{d.l.vmDir(vmid), d.l.runDir(vmid)} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left behind (%v)", p, err)
			}
		}
		if _, err := d.VM(ctx, vmid); !errors.Is(err, backends.ErrNotFound) {
			t.Errorf("destroyed VM: err = %v", err)
		}
	})
}

func TestBadInput(t *testing.T) {
	data := testvm.DataDir(t)
	d := newDriver(t, data)
	ctx := context.Background()

	if _, _, err := d.Clone(ctx, backends.CloneRequest{Template: 4242, Name: "x-repro-a"}); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("missing template: err = %v", err)
	}
	if _, err := d.Start(ctx, 777); !errors.Is(err, backends.ErrNotFound) || !strings.Contains(err.Error(), "777") {
		t.Errorf("unknown vmid: err = %v", err)
	}
	if _, err := d.Console(ctx, 777); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("console of unknown vmid: err = %v", err)
	}
	if _, _, err := d.Clone(ctx, backends.CloneRequest{Template: tinyVMID, Name: "Bad Name"}); err == nil {
		t.Error("a name with spaces was accepted")
	}
	vmid, task, err := d.Clone(ctx, backends.CloneRequest{Template: tinyVMID, Name: "x-repro-one"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, d, task)
	if _, _, err := d.Clone(ctx, backends.CloneRequest{Template: tinyVMID, Name: "x-repro-one"}); !errors.Is(err, backends.ErrExists) || !strings.Contains(err.Error(), strconv.Itoa(vmid)) {
		t.Errorf("duplicate name: err = %v", err)
	}
	if _, err := d.Console(ctx, vmid); !errors.Is(err, backends.ErrNotRunning) {
		t.Errorf("console of a stopped VM: err = %v", err)
	}
	if err := d.GuestPing(ctx, vmid); !errors.Is(err, backends.ErrNotRunning) {
		t.Errorf("agent of a stopped VM: err = %v", err)
	}
	if err := d.ResizeDisk(ctx, vmid, "disk0", 0); err == nil {
		t.Error("shrinking a disk was accepted")
	}
	vms, _ := d.VMs(ctx)
	if len(vms) != 1 {
		t.Errorf("refused calls changed the VM list: %+v", vms)
	}
}

// TestFullCloneOntoFullDisk needs root to mount a small tmpfs.
func TestFullCloneOntoFullDisk(t *testing.T) {
	tpl := testvm.TemplatesDir(t)
	data := testvm.ShortTempDir(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", data).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", data).Run() })
	os.MkdirAll(filepath.Join(data, "templates"), 0o755)
	entries, _ := os.ReadDir(tpl)
	for _, e := range entries {
		os.Symlink(filepath.Join(tpl, e.Name()), filepath.Join(data, "templates", e.Name()))
	}
	d := newDriver(t, data)
	_, _, err := d.Clone(context.Background(), backends.CloneRequest{Template: tinyVMID, Name: "x-repro-full", Full: true})
	if err == nil || !strings.Contains(err.Error(), "not enough disk space") {
		t.Fatalf("full clone onto a full disk: err = %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(data, "vms")); len(entries) != 0 {
		t.Fatalf("a refused clone left %d entries in vms/", len(entries))
	}
}

func TestFullClone(t *testing.T) {
	d := newDriver(t, testvm.DataDir(t))
	ctx := context.Background()
	vmid, task, err := d.Clone(ctx, backends.CloneRequest{Template: tinyVMID, Name: "x-repro-full", Full: true})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, d, task)
	c, err := d.config(vmid)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lock != "" || filepath.Dir(c.Kernel) != d.l.vmDir(vmid) {
		t.Fatalf("full clone config: lock %q kernel %s", c.Lock, c.Kernel)
	}
	task, err = d.Destroy(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, d, task)
}

func pauseVM(t *testing.T, d *Driver, vmid int) {
	t.Helper()
	ctx := context.Background()
	if err := d.monitorDo(ctx, vmid, func(m *qmp.Client) error { return m.Stop(ctx) }); err != nil {
		t.Fatal(err)
	}
}

func resumeVM(t *testing.T, d *Driver, vmid int) {
	t.Helper()
	ctx := context.Background()
	if err := d.monitorDo(ctx, vmid, func(m *qmp.Client) error { return m.Cont(ctx) }); err != nil {
		t.Fatal(err)
	}
}

// pixelDiff counts the pixels that differ between two images of one size.
func pixelDiff(a *image.RGBA, b image.Image) int {
	if a.Bounds() != b.Bounds() {
		return a.Bounds().Dx() * a.Bounds().Dy()
	}
	n := 0
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			if r1>>8 != r2>>8 || g1>>8 != g2>>8 || b1>>8 != b2>>8 {
				n++
			}
		}
	}
	return n
}
