package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/poligon/poligon/backends/qmp"
)

// processTag marks our QEMU processes: -name ...,process=poligon-<vmid>. A
// pidfile is trusted only when the process it names carries the tag, so a
// recycled pid is never mistaken for a VM.
func processTag(vmid int) string { return "process=poligon-" + strconv.Itoa(vmid) }

// qemuArgs builds the command line of a VM. loadvm, when set, restores that
// snapshot at start.
func (d *Driver) qemuArgs(c vmConfig, loadvm string) []string {
	dir := d.l.vmDir(c.VMID)
	netdev, nic := "user,id=net0", "virtio-net-pci,netdev=net0"
	var uplink []string
	if c.Network != "" {
		// Clone checked the name, and joinNetwork the path, before a
		// VM can get here.
		n, _ := d.l.network(c.Network)
		netdev = standNIC
		nic += ",mac=" + vmMAC(c.VMID)
		uplink = n.uplinkArgs()
	}
	accel := d.accel.Mode
	if accel == AccelTCG && c.Cores > 1 {
		accel = "tcg,thread=multi"
	}
	args := []string{
		"-name", "guest=" + c.Name + "," + processTag(c.VMID),
		"-machine", "pc",
		"-accel", accel,
		"-m", strconv.Itoa(c.MemoryMB),
		"-smp", strconv.Itoa(c.Cores),
		"-nodefaults", "-no-user-config",
		"-vga", "std",
		"-display", "none",
		// QEMU queues VNC keys at key-delay-ms (default 10, ~44 chars/s)
		// and drops what overflows its queue; the console paces at 5 ms.
		"-vnc", "unix:" + optEscape(d.l.vncSocket(c.VMID)) + ",key-delay-ms=4",
		"-qmp", "unix:" + optEscape(d.l.qmpSocket(c.VMID)) + ",server=on,wait=off",
		"-chardev", "socket,id=qga0,path=" + optEscape(d.l.qgaSocket(c.VMID)) + ",server=on,wait=off",
		"-device", "virtio-serial-pci",
		"-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
		"-netdev", netdev,
		"-device", nic,
		"-usb", "-device", "usb-tablet",
		"-chardev", "file,id=serial0,path=" + optEscape(filepath.Join(dir, "serial.log")),
		"-serial", "chardev:serial0",
		"-pidfile", d.l.pidfile(c.VMID),
		"-daemonize",
	}
	if d.accel.Mode == AccelKVM {
		args = append(args, "-cpu", "host")
	}
	if c.Firmware == "uefi" {
		args = append(args,
			"-drive", "if=pflash,format=raw,readonly=on,file="+optEscape(d.opts.OVMFCode),
			"-drive", "if=pflash,format=raw,file="+optEscape(filepath.Join(dir, "efivars.fd")))
	}
	if c.Kernel != "" {
		args = append(args, "-kernel", c.Kernel)
		if c.Initrd != "" {
			args = append(args, "-initrd", c.Initrd)
		}
		if c.Cmdline != "" {
			args = append(args, "-append", c.Cmdline)
		}
	}
	for i, dk := range c.Disks {
		args = append(args,
			"-blockdev", "driver=file,filename="+optEscape(c.diskPath(dir, dk))+",node-name=f-"+dk.Name,
			"-blockdev", "driver=qcow2,file=f-"+dk.Name+",node-name="+dk.Name,
			"-device", fmt.Sprintf("virtio-blk-pci,drive=%s,id=%s-dev,bootindex=%d", dk.Name, dk.Name, i+1))
	}
	if c.HasCD {
		cd := "ide-cd,id=cd0,bus=ide.1,bootindex=9"
		if c.CDROM != "" {
			args = append(args,
				"-blockdev", "driver=file,filename="+optEscape(c.CDROM)+",node-name=f-cd0,read-only=on",
				"-blockdev", "driver=raw,file=f-cd0,node-name=cd0-media,read-only=on")
			cd += ",drive=cd0-media"
		}
		args = append(args, "-device", cd)
	}
	if loadvm != "" {
		args = append(args, "-loadvm", loadvm)
	}
	return append(args, uplink...)
}

// pid answers the pid of the VM's QEMU when it is alive.
func (d *Driver) pid(vmid int) (int, bool) {
	raw, err := os.ReadFile(d.l.pidfile(vmid))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, false
	}
	tag := "," + processTag(vmid)
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		if bytes.HasSuffix(arg, []byte(tag)) {
			return pid, true
		}
	}
	return 0, false
}

func (d *Driver) alive(vmid int) bool {
	_, ok := d.pid(vmid)
	return ok
}

// launch starts QEMU for c and waits until its monitor answers.
func (d *Driver) launch(ctx context.Context, c vmConfig, loadvm string) error {
	// Mkdir, not MkdirAll: the run directory exists and was checked, and
	// a <vmid> entry already there must pass the same check before we
	// remove files in it or let QEMU create sockets there.
	if err := makePrivateDir(d.l.runDir(c.VMID), os.Mkdir); err != nil {
		return fmt.Errorf("vmid %d run directory: %w", c.VMID, err)
	}
	for _, f := range []string{d.l.qmpSocket(c.VMID), d.l.qgaSocket(c.VMID), d.l.vncSocket(c.VMID), d.l.pidfile(c.VMID)} {
		os.Remove(f) // stale from a VM that died without cleaning up
	}
	if c.Network != "" {
		if err := d.joinNetwork(ctx, c.Network); err != nil {
			return fmt.Errorf("vmid %d: %w", c.VMID, err)
		}
	}
	cmd := exec.CommandContext(ctx, d.opts.QEMU, d.qemuArgs(c, loadvm)...)
	cmd.Dir = d.l.vmDir(c.VMID)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	// A new session: the daemonized QEMU must not die with poligon's
	// terminal or process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	d.log.InfoContext(ctx, "starting vm", "vmid", c.VMID, "accel", d.accel.Mode)
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("qemu did not start: %s", lastLines(msg, 5))
	}
	// -daemonize returns once the VM is set up; the monitor follows at once.
	deadline := time.Now().Add(monitorWait)
	for {
		err := d.monitorDo(ctx, c.VMID, func(*qmp.Client) error { return nil })
		if err == nil {
			return nil
		}
		pid, alive := d.pid(c.VMID)
		if !alive {
			return fmt.Errorf("qemu started but exited before its monitor answered: %w", err)
		}
		if time.Now().After(deadline) {
			// A VM nobody can control is worth nothing: do not leave it
			// running. Not d.kill: its polite quit needs the monitor.
			if kerr := d.sigkill(context.WithoutCancel(ctx), c.VMID, pid); kerr != nil {
				return fmt.Errorf("qemu started but its monitor did not answer in %v (%w), and stopping it failed: %v", monitorWait, err, kerr)
			}
			return fmt.Errorf("qemu started but its monitor did not answer in %v, so it was stopped: %w", monitorWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// monitorWait is how long a started QEMU has to answer on its monitor.
var monitorWait = 10 * time.Second

// kill ends the VM's QEMU: quit over QMP, then SIGKILL, and waits for it.
func (d *Driver) kill(ctx context.Context, vmid int) error {
	if gone, pid := d.end(ctx, vmid, 5*time.Second, (*qmp.Client).Quit); !gone {
		return d.sigkill(ctx, vmid, pid)
	}
	return nil
}

// end asks the VM's QEMU to end with one monitor command (powerdown, quit)
// and waits up to grace for its process to go; a VM that is not running has
// ended already. It answers whether QEMU is gone and, when it is not, its
// pid for a harder stop (QEMU removes its pidfile while it exits).
func (d *Driver) end(ctx context.Context, vmid int, grace time.Duration, ask func(*qmp.Client, context.Context) error) (bool, int) {
	pid, ok := d.pid(vmid)
	if !ok {
		d.cleanupRun(vmid)
		return true, 0
	}
	d.dropScreen(vmid) // before QEMU goes: no reconnect attempts to a dying VM
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := d.monitorDo(qctx, vmid, func(c *qmp.Client) error { return ask(c, qctx) })
	cancel()
	if err != nil || !waitGone(ctx, pid, grace) {
		return false, pid
	}
	d.cleanupRun(vmid)
	return true, pid
}

// sigkill ends the VM's QEMU (pid) at once and waits for it.
func (d *Driver) sigkill(ctx context.Context, vmid, pid int) error {
	d.dropScreen(vmid)
	syscall.Kill(pid, syscall.SIGKILL)
	if !waitGone(ctx, pid, 10*time.Second) {
		return fmt.Errorf("qemu (pid %d) did not exit after SIGKILL", pid)
	}
	d.cleanupRun(vmid)
	return nil
}

// waitGone polls until process pid has exited or the timeout passes. QEMU
// removes its pidfile while it exits, so the pid itself is watched.
func waitGone(ctx context.Context, pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if processGone(pid) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processGone reports whether pid has exited: no such process, or a zombie
// its parent (init, for a daemonized QEMU) has not reaped yet.
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses, which may itself
	// hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z' || stat[i+2] == 'X'
	}
	return false
}

// cleanupRun removes the sockets and pidfile of a stopped VM and forgets
// its connections.
func (d *Driver) cleanupRun(vmid int) {
	d.drop(vmid)
	os.RemoveAll(d.l.runDir(vmid))
}

// optEscape doubles commas, QEMU's escape inside a key=value option list.
func optEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}
