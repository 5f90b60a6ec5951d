package redfishtest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/internal/testvm"
)

// VM is a QEMU machine for the fake to drive: the tiny template's kernel and
// initramfs (with qemu-ga), an IDE CD drive "cdrom0" with no medium, and
// several QMP sockets, because QEMU serves one client per socket and a test
// wants to look at the machine while a fake drives it. -no-shutdown keeps
// QEMU alive when the guest powers itself off, as a real machine's BMC stays
// up: the fake then reports Off and powers it on with system_reset + cont.
type VM struct {
	Dir  string
	QMP  []string // QMP sockets: one per fake, and one for the test
	QGA  string   // the guest agent's socket
	CDID string   // the CD drive's qdev id
	cmd  *exec.Cmd
	done chan struct{}
}

// cdModules are the kernel modules that give the tiny guest /dev/sr0 on
// QEMU's PIIX IDE controller (their dependencies come with them). The tiny
// template leaves them out.
var cdModules = []string{"ata_piix", "sr_mod"}

// StartVM boots the tiny template with a CD drive. templates is the
// directory internal/testvm.TemplatesDir answers; dir holds the sockets and
// must be short (unix socket paths fit in 108 bytes). The VM is running
// when StartVM returns; WaitAgent waits for its guest agent.
func StartVM(templates, dir string, qmpSockets int) (*VM, error) {
	initrd, err := testvm.TinyWithModules(templates, "bmc-cdrom", cdModules)
	if err != nil {
		return nil, err
	}
	accel, err := qemu.ResolveAccel("", "auto")
	if err != nil {
		return nil, err
	}
	vm := &VM{Dir: dir, QGA: filepath.Join(dir, "qga"), CDID: "cdrom0", done: make(chan struct{})}
	args := []string{
		"-name", "redfishtest",
		"-machine", "pc", "-accel", accel.Mode,
		"-m", "128", "-smp", "1",
		"-nodefaults", "-no-user-config", "-vga", "std", "-display", "none",
		"-no-shutdown",
		"-kernel", filepath.Join(templates, "tiny", "vmlinuz"),
		"-initrd", initrd,
		"-append", "console=tty1 console=ttyS0 quiet",
		"-chardev", "socket,id=qga0,path=" + vm.QGA + ",server=on,wait=off",
		"-device", "virtio-serial-pci",
		"-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
		"-drive", "if=none,id=cd0,media=cdrom,readonly=on",
		"-device", "ide-cd,drive=cd0,id=" + vm.CDID + ",bus=ide.1",
		"-serial", "file:" + filepath.Join(dir, "serial.log"),
	}
	if accel.Mode == qemu.AccelKVM {
		args = append(args, "-cpu", "host")
	}
	for i := range qmpSockets {
		p := filepath.Join(dir, fmt.Sprintf("qmp%d", i))
		vm.QMP = append(vm.QMP, p)
		args = append(args, "-qmp", "unix:"+p+",server=on,wait=off")
	}
	var stderr bytes.Buffer
	vm.cmd = exec.Command("qemu-system-x86_64", args...)
	vm.cmd.Stderr = &stderr
	// QEMU must not outlive a test binary that dies.
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := vm.cmd.Start(); err != nil {
		return nil, fmt.Errorf("redfishtest: starting qemu: %w", err)
	}
	go func() { vm.cmd.Wait(); close(vm.done) }()
	// The monitor answers as soon as QEMU has set the machine up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := qmp.Dial(ctx, vm.QMP[len(vm.QMP)-1])
		cancel()
		if err == nil {
			c.Close()
			return vm, nil
		}
		select {
		case <-vm.done:
			return nil, fmt.Errorf("redfishtest: qemu exited: %s", strings.TrimSpace(stderr.String()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			vm.Stop()
			return nil, fmt.Errorf("redfishtest: qemu's monitor did not answer: %v", err)
		}
	}
}

// Stop ends QEMU and waits for it.
func (vm *VM) Stop() {
	if vm.cmd.Process != nil {
		vm.cmd.Process.Kill()
	}
	<-vm.done
}

// WaitAgent waits until the guest agent answers a ping, or ctx ends.
func (vm *VM) WaitAgent(ctx context.Context) error {
	for {
		err := vm.pingAgent(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redfishtest: the guest agent did not answer: %w", err)
		}
	}
}

// pingAgent pings once, giving the agent at most a second: one dial per
// attempt, so a reset guest's fresh agent is met on a clean channel.
func (vm *VM) pingAgent(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := qga.Dial(ctx, vm.QGA)
	if err != nil {
		<-ctx.Done() // the socket exists from the start: a dial error is rare
		return err
	}
	defer c.Close()
	return c.Ping(ctx)
}

// Exec runs a shell command in the guest and answers its stdout; a
// non-zero exit is an error carrying stderr.
func (vm *VM) Exec(ctx context.Context, script string) (string, error) {
	c, err := qga.Dial(ctx, vm.QGA)
	if err != nil {
		return "", err
	}
	defer c.Close()
	pid, err := c.Exec(ctx, qga.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, CaptureOutput: true})
	if err != nil {
		return "", err
	}
	for {
		st, err := c.ExecStatus(ctx, pid)
		if err != nil {
			return "", err
		}
		if st.Exited {
			if st.ExitCode != 0 {
				return string(st.Stdout), fmt.Errorf("guest: %q exited %d: %s", script, st.ExitCode, strings.TrimSpace(string(st.Stderr)))
			}
			return string(st.Stdout), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond): // qemu-ga has no exit notification
		}
	}
}
