package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/testvm"
)

// A VM's run directory (<run>/<vmid>) found in place must pass the same
// check as the run directory before launch removes files in it or QEMU
// puts sockets there. QEMU is "false" here: nothing boots.
func TestVMRunDirMustBePrivate(t *testing.T) {
	d := newDriver(t, testvm.ShortTempDir(t))
	d.opts.QEMU = "false"
	c := vmConfig{VMID: 100, Name: "x-repro-run", MemoryMB: 64, Cores: 1}
	if err := os.MkdirAll(d.l.vmDir(c.VMID), 0o755); err != nil {
		t.Fatal(err)
	}
	run := d.l.runDir(c.VMID)
	launch := func() error { return d.launch(context.Background(), c, "") }

	t.Run("a symlink is refused", func(t *testing.T) {
		os.RemoveAll(run)
		elsewhere := t.TempDir()
		bait := filepath.Join(elsewhere, "qemu.pid")
		if err := os.WriteFile(bait, []byte("not yours"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, run); err != nil {
			t.Fatal(err)
		}
		if err := launch(); err == nil || !strings.Contains(err.Error(), run) || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("launch = %v, want a refusal naming %s as a symbolic link", err, run)
		}
		if _, err := os.Stat(bait); err != nil {
			t.Errorf("launch removed a file through the symlink: %v", err)
		}
	})
	t.Run("another user's is refused", func(t *testing.T) {
		os.RemoveAll(run)
		if os.Getuid() != 0 {
			t.Skip("needs root to give a directory to another uid")
		}
		if err := os.Mkdir(run, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(run, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := launch(); err == nil || !strings.Contains(err.Error(), run) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("launch = %v, want a refusal naming %s as owned by uid 65534", err, run)
		}
	})
	t.Run("ours but 0755 is narrowed to 0700", func(t *testing.T) {
		os.RemoveAll(run)
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(run, 0o755)
		if err := launch(); err == nil || !strings.Contains(err.Error(), "qemu did not start") {
			t.Fatalf("launch with QEMU=false = %v, want it past the directory check", err)
		}
		if fi, err := os.Lstat(run); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("run directory after launch: %v, %v; want mode 0700", fi.Mode(), err)
		}
	})
}

// fakeQEMU writes a script that does what a daemonized QEMU does for
// launch (a pidfile naming a process tagged with the vmid) but never opens
// a monitor; the pid also goes to pids, which launch cannot remove.
const fakeQEMU = `#!/bin/bash
while [ $# -gt 0 ]; do
	case "$1" in
	-name) name=$2; shift ;;
	-pidfile) pidfile=$2; shift ;;
	esac
	shift
done
(exec -a "$name" sleep 600) </dev/null >/dev/null 2>&1 &
pid=$!
# Like QEMU, write the pidfile once the process is what it names.
until [ "$(tr '\0' '\n' </proc/$pid/cmdline | head -n 1)" = "$name" ]; do sleep 0.01; done
echo $pid >"$pidfile"
echo $pid >%q
`

func TestLaunchStopsQEMUWhoseMonitorNeverAnswers(t *testing.T) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("needs /bin/bash for the fake QEMU")
	}
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	script := filepath.Join(dir, "qemu")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(fakeQEMU, pids)), 0o755); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, testvm.ShortTempDir(t))
	d.opts.QEMU = script
	old := monitorWait
	monitorWait = time.Second
	t.Cleanup(func() { monitorWait = old })
	c := vmConfig{VMID: 100, Name: "x-repro-mute", MemoryMB: 64, Cores: 1}
	if err := os.MkdirAll(d.l.vmDir(c.VMID), 0o755); err != nil {
		t.Fatal(err)
	}

	err := d.launch(context.Background(), c, "")
	raw, rerr := os.ReadFile(pids)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(raw)))
	if rerr != nil || perr != nil || pid <= 0 {
		t.Fatalf("the fake QEMU did not run (pids file %q: %v, %v); launch = %v", raw, rerr, perr, err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err == nil || !strings.Contains(err.Error(), "monitor did not answer") {
		t.Fatalf("launch = %v, want a monitor timeout", err)
	}
	if !processGone(pid) {
		t.Fatalf("launch failed but left the QEMU (pid %d) running", pid)
	}
	if d.alive(c.VMID) {
		t.Fatal("the VM still counts as alive")
	}
}
