package kvmdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/internal/testvm"
)

// The fake runs its own QEMU rather than a VM of the local backend: a PiKVM's
// machine needs devices that backend's VMs do not have (a CD drive on every
// VM, a USB keyboard, power-off that keeps the process), and the fake needs
// QMP for itself. The IDs below are what the fake addresses over QMP.
const (
	cdDevice  = "cdrom0"       // the IDE CD the MSD presents in CD mode
	usbBus    = "usb-bus.0"    // the piix3 UHCI controller's bus (-usb)
	flashDev  = "kvmd-flash0"  // the usb-storage device of flash mode
	flashNode = "kvmd-flash0n" // its block node
)

// VMConfig describes the machine behind the fake.
type VMConfig struct {
	Kernel, Initrd, Cmdline string
	MemoryMB                int    // default 128
	Dir                     string // sockets, logs and screendumps; short (unix socket paths < 108 bytes)
	Accel                   string // "kvm" or "tcg"; "" probes (backends/qemu's ResolveAccel)
}

// VM is a QEMU process with an IDE CD drive, a USB keyboard and tablet, a
// guest agent socket and a QMP connection the fake shares with tests. A
// guest power-off pauses it (-action shutdown=pause) instead of ending QEMU,
// so the ATX power button can start it again, as on a real machine.
type VM struct {
	cfg    VMConfig
	pid    int
	qmpMu  sync.Mutex
	qmpC   *qmp.Client
	dumpMu sync.Mutex
}

// StartVM starts the machine and waits for its monitor.
func StartVM(ctx context.Context, cfg VMConfig) (*VM, error) {
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 128
	}
	accel := cfg.Accel
	if accel == "" {
		a, err := qemu.ResolveAccel("", qemu.AccelAuto)
		if err != nil {
			return nil, err
		}
		accel = a.Mode
	}
	v := &VM{cfg: cfg}
	esc := func(s string) string { return strings.ReplaceAll(s, ",", ",,") }
	args := []string{
		"-name", "guest=kvmdtest,process=kvmdtest",
		"-machine", "pc", "-accel", accel, "-m", strconv.Itoa(cfg.MemoryMB), "-smp", "1",
		"-nodefaults", "-no-user-config", "-vga", "std", "-display", "none",
		"-qmp", "unix:" + esc(v.QMPSocket()) + ",server=on,wait=off",
		"-chardev", "socket,id=qga0,path=" + esc(v.AgentSocket()) + ",server=on,wait=off",
		"-device", "virtio-serial-pci",
		"-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
		// A PiKVM is a USB keyboard and an absolute USB mouse. usb-kbd
		// queues 16 key codes and the guest polls it every 10 ms, so
		// events sent faster than that are lost, as on real targets.
		"-usb", "-device", "usb-kbd,id=kbd0", "-device", "usb-tablet,id=tablet0",
		"-drive", "if=none,id=cd0,media=cdrom,readonly=on",
		"-device", "ide-cd,drive=cd0,id=" + cdDevice + ",bus=ide.1",
		"-kernel", cfg.Kernel, "-initrd", cfg.Initrd, "-append", cfg.Cmdline,
		"-chardev", "file,id=serial0,path=" + esc(filepath.Join(cfg.Dir, "serial.log")),
		"-serial", "chardev:serial0",
		"-action", "shutdown=pause",
		"-pidfile", v.pidfile(), "-daemonize",
	}
	if accel == qemu.AccelKVM {
		args = append(args, "-cpu", "host")
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.Dir = cfg.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kvmdtest: qemu did not start: %v: %s", err, strings.TrimSpace(out.String()))
	}
	raw, err := os.ReadFile(v.pidfile())
	if err != nil {
		return nil, fmt.Errorf("kvmdtest: qemu pidfile: %w", err)
	}
	v.pid, _ = strconv.Atoi(strings.TrimSpace(string(raw)))
	c, err := qmp.Dial(ctx, v.QMPSocket())
	if err != nil {
		v.kill()
		return nil, fmt.Errorf("kvmdtest: %w", err)
	}
	v.qmpC = c
	return v, nil
}

func (v *VM) pidfile() string { return filepath.Join(v.cfg.Dir, "qemu.pid") }

// QMPSocket is the monitor's socket (the fake holds its only connection:
// use QMP to share it).
func (v *VM) QMPSocket() string { return filepath.Join(v.cfg.Dir, "qmp.sock") }

// AgentSocket is the host end of the guest agent channel.
func (v *VM) AgentSocket() string { return filepath.Join(v.cfg.Dir, "qga.sock") }

// Dir is the VM's directory (serial.log is the guest's console log).
func (v *VM) Dir() string { return v.cfg.Dir }

// QMP answers the monitor connection, redialled if it broke.
func (v *VM) QMP(ctx context.Context) (*qmp.Client, error) {
	v.qmpMu.Lock()
	defer v.qmpMu.Unlock()
	if v.qmpC != nil {
		return v.qmpC, nil
	}
	c, err := qmp.Dial(ctx, v.QMPSocket())
	if err != nil {
		return nil, err
	}
	v.qmpC = c
	return c, nil
}

// Execute runs one QMP command; a broken connection is dropped so the
// next call redials.
func (v *VM) Execute(ctx context.Context, command string, args, result any) error {
	c, err := v.QMP(ctx)
	if err != nil {
		return err
	}
	err = c.Execute(ctx, command, args, result)
	if errors.Is(err, qmp.ErrClosed) {
		v.qmpMu.Lock()
		if v.qmpC == c {
			v.qmpC = nil
		}
		v.qmpMu.Unlock()
		c.Close()
	}
	return err
}

// Running reports whether the guest's CPUs run: the power LED of the fake.
func (v *VM) Running(ctx context.Context) (bool, error) {
	var st qmp.Status
	if err := v.Execute(ctx, "query-status", nil, &st); err != nil {
		return false, err
	}
	return st.Running, nil
}

// Agent connects a guest agent client (close it when done).
func (v *VM) Agent(ctx context.Context) (*qga.Client, error) {
	return qga.Dial(ctx, v.AgentSocket())
}

// WaitAgent waits until the guest agent answers a ping.
func (v *VM) WaitAgent(ctx context.Context, a *qga.Client) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := a.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("kvmdtest: the guest agent did not answer: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close ends QEMU.
func (v *VM) Close() error {
	v.qmpMu.Lock()
	c := v.qmpC
	v.qmpC = nil
	v.qmpMu.Unlock()
	if c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		c.Quit(ctx)
		cancel()
		c.Close()
	}
	return v.kill()
}

func (v *VM) kill() error {
	if v.pid <= 0 {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := syscall.Kill(v.pid, 0); err != nil {
			return nil // gone
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", v.pid)); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
				return nil
			}
		}
		if time.Now().After(deadline) {
			syscall.Kill(v.pid, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ExtraModules are the kernel modules the fake's VM needs beyond the tiny
// template's: the IDE CD (ata_piix, sr_mod: the MSD in CD mode is /dev/sr0),
// USB 1.1 with a HID keyboard and tablet (uhci_hcd, usbhid, hid_generic: a
// PiKVM is a USB keyboard and an absolute USB mouse) and USB storage (the MSD
// in flash mode is a usb-storage disk, /dev/sda). Their dependencies are
// read from each module's depends= field.
var ExtraModules = []string{"ata_piix", "sr_mod", "uhci_hcd", "usbhid", "hid_generic", "usb_storage", "sd_mod"}

// TinyConfig builds the tiny template (internal/testvm) and the initrd with
// the ExtraModules layered on, and answers the machine to start (Dir still
// to be set). It skips the test when QEMU is not installed.
func TinyConfig(t testing.TB) VMConfig {
	t.Helper()
	tpl := testvm.TemplatesDir(t)
	initrd, err := testvm.TinyWithModules(tpl, "kvmdtest", ExtraModules)
	if err != nil {
		t.Fatalf("kvmdtest: %v", err)
	}
	return VMConfig{
		Kernel:  filepath.Join(tpl, "tiny", "vmlinuz"),
		Initrd:  initrd,
		Cmdline: "console=tty1 console=ttyS0 quiet",
	}
}

// StartTiny starts a TinyConfig machine in dir and waits for its guest
// agent.
func StartTiny(ctx context.Context, cfg VMConfig, dir string) (*VM, error) {
	cfg.Dir = dir
	v, err := StartVM(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a, err := v.Agent(ctx)
	if err == nil {
		err = v.WaitAgent(ctx, a)
		a.Close()
	}
	if err != nil {
		v.Close()
		return nil, fmt.Errorf("%w (serial log: %s)", err, tail(filepath.Join(dir, "serial.log")))
	}
	return v, nil
}

// TinyVM starts the tiny machine for one test and stops it when the test
// ends.
func TinyVM(t testing.TB) *VM {
	t.Helper()
	cfg := TinyConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := StartTiny(ctx, cfg, testvm.ShortTempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func tail(path string) string {
	raw, _ := os.ReadFile(path)
	if len(raw) > 2000 {
		raw = raw[len(raw)-2000:]
	}
	return string(raw)
}

// Screendump captures the machine's screen through QMP.
func (v *VM) Screendump(ctx context.Context) (*image.RGBA, error) {
	v.dumpMu.Lock()
	defer v.dumpMu.Unlock()
	path := filepath.Join(v.cfg.Dir, "dump.ppm")
	if err := v.Execute(ctx, "screendump", map[string]any{"filename": path}, nil); err != nil {
		return nil, err
	}
	return readPPM(path)
}
