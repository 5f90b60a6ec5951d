package qemu

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The accelerators a driver can be asked for.
const (
	AccelAuto = "auto" // KVM when the probe guest runs under it, else TCG
	AccelKVM  = "kvm"  // KVM or an error
	AccelTCG  = "tcg"  // emulation, no probe
)

// Accel is the accelerator decision for a driver's VMs.
type Accel struct {
	Mode      string        // kvm | tcg: what the VMs run with
	Requested string        // auto | kvm | tcg: what the config asked for
	Reason    string        // why, for people: "probe guest ran in 41 ms"
	Probe     time.Duration // how long the KVM probe took; 0 when it did not run
}

// String reads "kvm (auto: probe guest ran in 41 ms)".
func (a Accel) String() string { return fmt.Sprintf("%s (%s: %s)", a.Mode, a.Requested, a.Reason) }

// ResolveAccel answers the accelerator VMs started by the QEMU binary qemu
// ("" = qemu-system-x86_64) get when requested ("" = auto) is asked for.
// For auto and kvm it runs the KVM probe, once per process and binary; a
// kvm that cannot run the probe guest is an error.
func ResolveAccel(qemu, requested string) (Accel, error) {
	return resolveAccel(qemu, requested, nil)
}

// resolveAccel is ResolveAccel with the probe to use (nil: the real one,
// once per process); tests give their own.
func resolveAccel(qemu, requested string, probe func(qemu string) kvmProbe) (Accel, error) {
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	if probe == nil {
		probe = probeKVMOnce
	}
	switch requested {
	case "", AccelAuto:
		p := probe(qemu)
		mode := AccelTCG
		if p.ok() {
			mode = AccelKVM
		}
		return Accel{Mode: mode, Requested: AccelAuto, Reason: p.reason, Probe: p.took}, nil
	case AccelKVM:
		p := probe(qemu)
		if !p.ok() {
			return Accel{}, fmt.Errorf(`accel = "kvm", but KVM cannot run a guest here: %s; set accel = "tcg" (or POLIGON_ACCEL=tcg) to run VMs under emulation, or accel = "auto" to fall back by itself`, p.reason)
		}
		return Accel{Mode: AccelKVM, Requested: AccelKVM, Reason: p.reason, Probe: p.took}, nil
	case AccelTCG:
		return Accel{Mode: AccelTCG, Requested: AccelTCG, Reason: "asked for, KVM not probed"}, nil
	}
	return Accel{}, fmt.Errorf("accel %q: use auto, kvm or tcg", requested)
}

// probeCause classifies a probe's outcome.
type probeCause int

const (
	probeRan      probeCause = iota // the guest ran to its end under KVM
	probeNoDevice                   // no /dev/kvm
	probeNoAccess                   // /dev/kvm does not open
	probeNoQEMU                     // the QEMU binary is missing
	probeRefused                    // QEMU quit before the guest finished
	probeSilent                     // the guest printed nothing in time
	probeStalled                    // the guest started but did not finish in time
)

// kvmProbe is what the probe found.
type kvmProbe struct {
	cause  probeCause
	reason string
	took   time.Duration // 0 when no guest was started
}

func (p kvmProbe) ok() bool { return p.cause == probeRan }

// probeDeadline bounds the probe guest's run. Its work takes hardware about
// a tenth of a second, and TCG about half a second here, QEMU and SeaBIOS
// starting included. The machines this guards against (nested
// virtualization without the CPU flag, sandboxes that pass /dev/kvm
// through) never run it, or run it a thousand times slower: one measured
// did 2.5M loop turns a second and did not boot the tiny template in 100 s.
const probeDeadline = 3 * time.Second

// The probe guest's markers on its serial port, one per stage.
const (
	markReal = "poligon-probe:16 "  // real mode, from the boot sector
	markLong = "poligon-probe:64 "  // 64-bit long mode with paging
	markDone = "poligon-probe:ok\n" // the work is done
)

var probes struct {
	mu   sync.Mutex
	once map[string]*probeOnce
}

type probeOnce struct {
	sync.Once
	p kvmProbe
}

// probeKVMOnce runs probeKVM once per process for each QEMU binary: every
// driver of a process shares the answer.
func probeKVMOnce(qemu string) kvmProbe {
	probes.mu.Lock()
	if probes.once == nil {
		probes.once = map[string]*probeOnce{}
	}
	o, ok := probes.once[qemu]
	if !ok {
		o = &probeOnce{}
		probes.once[qemu] = o
	}
	probes.mu.Unlock()
	o.Do(func() { o.p = probeKVM("/dev/kvm", qemu) })
	return o.p
}

// probeKVM boots the probe guest with QEMU under KVM, with the flags the
// driver's VMs get, and answers whether it ran to its end in time. Opening
// /dev/kvm is not enough: some machines let it open and then never run a
// guest (or run it at a crawl), and a VM started there hangs silently.
func probeKVM(dev, qemu string) kvmProbe {
	if _, err := os.Stat(dev); errors.Is(err, fs.ErrNotExist) {
		return kvmProbe{cause: probeNoDevice, reason: "no " + dev}
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // "cannot open /dev/kvm: permission denied"
		}
		reason := "cannot open " + dev + ": " + err.Error()
		if errors.Is(err, fs.ErrPermission) {
			reason += " (add the user to group kvm)"
		}
		return kvmProbe{cause: probeNoAccess, reason: reason}
	}
	f.Close()
	bin, err := exec.LookPath(qemu)
	if err != nil {
		return kvmProbe{cause: probeNoQEMU, reason: qemu + " not found: KVM not probed"}
	}
	return runProbeGuest(bin, []string{"-accel", "kvm", "-cpu", "host"}, probeDeadline)
}

// runProbeGuest boots the probe guest with accelArgs and classifies what
// its serial port said by the deadline.
func runProbeGuest(bin string, accelArgs []string, deadline time.Duration) kvmProbe {
	dir, err := os.MkdirTemp("", "poligon-kvm-probe")
	if err != nil {
		return kvmProbe{cause: probeRefused, reason: "probe: " + err.Error()}
	}
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "boot.img")
	if err := os.WriteFile(img, probeSector(), 0o600); err != nil {
		return kvmProbe{cause: probeRefused, reason: "probe: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	args := append(append([]string{}, accelArgs...),
		"-machine", "pc", "-m", "16",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "stdio",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
		"-drive", "file="+optEscape(img)+",format=raw,if=floppy")
	cmd := exec.CommandContext(ctx, bin, args...)
	var serial, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &serial, &stderr
	cmd.WaitDelay = time.Second // a killed QEMU's pipes close at once; be sure
	// A guest stuck in KVM spins at 100 % CPU: it must not outlive us if
	// we die during the probe. Pdeathsig follows the thread that started
	// the child, so keep this goroutine on it until the child is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	began := time.Now()
	err = cmd.Run()
	took := time.Since(began)
	runtime.UnlockOSThread()

	out := serial.String()
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	secs := fmt.Sprintf("%.0f s", deadline.Seconds())
	switch {
	case strings.Contains(out, markDone):
		return kvmProbe{cause: probeRan, reason: fmt.Sprintf("probe guest ran in %d ms", took.Milliseconds()), took: took}
	case timedOut && strings.Contains(out, markLong):
		return kvmProbe{cause: probeStalled, took: took,
			reason: "/dev/kvm opens but a KVM guest runs too slowly: 200M loop turns, a tenth of a second on hardware, not done in " + secs}
	case timedOut && strings.Contains(out, markReal):
		return kvmProbe{cause: probeStalled, took: took, reason: "/dev/kvm opens but a KVM guest did not reach 64-bit mode in " + secs}
	case timedOut:
		return kvmProbe{cause: probeSilent, took: took, reason: "/dev/kvm opens but a KVM guest printed nothing in " + secs}
	}
	why := lastLines(strings.TrimSpace(stderr.String()), 1)
	if why == "" && err != nil {
		why = err.Error()
	}
	why = strings.TrimPrefix(strings.TrimPrefix(why, bin+": "), filepath.Base(bin)+": ")
	return kvmProbe{cause: probeRefused, took: took, reason: "qemu refused KVM: " + why}
}

// probeSector is the probe guest: a boot sector that says it started, goes
// from real mode to 64-bit long mode with paging (as a Linux kernel does
// before it prints anything), does some work there, says so on COM1 and
// leaves QEMU through the isa-debug-exit device.
func probeSector() []byte {
	s := make([]byte, 512)
	n := copy(s, assemble(probeListing))
	copy(s[n:], markReal+"\x00"+markLong+"\x00"+markDone+"\x00")
	s[510], s[511] = 0x55, 0xaa
	return s
}

// assemble reads the bytes out of a listing: "addr  bytes | instruction"
// lines and "#" comments. Each address must be where the bytes before it
// end, so a byte lost or added in an edit cannot go unnoticed.
func assemble(listing string) []byte {
	var code []byte
	for _, line := range strings.Split(listing, "\n") {
		line, _, _ = strings.Cut(line, "|")
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if want := fmt.Sprintf("%x", 0x7c00+len(code)); f[0] != want {
			panic(fmt.Sprintf("probe listing: line %q is at %s", line, want))
		}
		b, err := hex.DecodeString(strings.Join(f[1:], ""))
		if err != nil {
			panic(fmt.Sprintf("probe listing: line %q: %v", line, err))
		}
		code = append(code, b...)
	}
	return code
}

// probeListing is the probe guest's code, assembled with GNU as at 0x7c00
// (where the BIOS loads a boot sector). The markers follow it at 0x7cde.
const probeListing = `
	# _start:
	7c00  fa                      | cli
	7c01  31 c0                   | xor %ax,%ax
	7c03  8e d8                   | mov %ax,%ds
	7c05  8e c0                   | mov %ax,%es
	7c07  8e d0                   | mov %ax,%ss
	7c09  66 bc 00 7c 00 00       | mov $0x7c00,%esp
	# COM1 is at 0x3f8; QEMU's UART sends what is written to it at once.
	7c0f  ba f8 03                | mov $0x3f8,%dx
	7c12  be de 7c                | mov $0x7cde,%si
	7c15  e8 56 00                | call 0x7c6e
	# Identity-map the first 2 MiB with one large page: PML4 at 0x1000,
	# PDPT at 0x2000, PD at 0x3000 (zeroed first).
	7c18  bf 00 10                | mov $0x1000,%di
	7c1b  b9 00 0c                | mov $0xc00,%cx
	7c1e  66 31 c0                | xor %eax,%eax
	7c21  66 f3 ab                | rep stos %eax,%es:(%di)
	7c24  c7 06 00 10 03 20       | movw $0x2003,0x1000
	7c2a  c7 06 00 20 03 30       | movw $0x3003,0x2000
	7c30  c7 06 00 30 83 00       | movw $0x83,0x3000
	7c36  66 b8 00 10 00 00       | mov $0x1000,%eax
	7c3c  0f 22 d8                | mov %eax,%cr3
	# PAE, EFER.LME, the GDT, then PG|PE and a far jump into 64-bit code.
	7c3f  0f 20 e0                | mov %cr4,%eax
	7c42  0c 20                   | or $0x20,%al
	7c44  0f 22 e0                | mov %eax,%cr4
	7c47  66 b9 80 00 00 c0       | mov $0xc0000080,%ecx
	7c4d  0f 32                   | rdmsr
	7c4f  80 cc 01                | or $0x1,%ah
	7c52  0f 30                   | wrmsr
	7c54  66 0f 01 16 d8 7c       | lgdtl 0x7cd8
	7c5a  0f 20 c0                | mov %cr0,%eax
	7c5d  66 0d 01 00 00 80       | or $0x80000001,%eax
	7c63  0f 22 c0                | mov %eax,%cr0
	7c66  66 ea 77 7c 00 00 08 00 | ljmpl $0x8,$0x7c77
	# puts16:
	7c6e  ac                      | lods %ds:(%si),%al
	7c6f  84 c0                   | test %al,%al
	7c71  74 03                   | je 0x7c76
	7c73  ee                      | out %al,(%dx)
	7c74  eb f8                   | jmp 0x7c6e
	7c76  c3                      | ret
	# long: (rdmsr overwrote dx)
	7c77  66 ba f8 03             | mov $0x3f8,%dx
	7c7b  48 8d 35 6e 00 00 00    | lea 0x6e(%rip),%rsi
	7c82  e8 33 00 00 00          | call 0x7cba
	# The work: 200M turns of a loop (hardware does them in about a tenth
	# of a second), then 1 MiB of fresh memory written.
	7c87  b9 00 c2 eb 0b          | mov $0xbebc200,%ecx
	7c8c  48 ff c9                | dec %rcx
	7c8f  75 fb                   | jne 0x7c8c
	7c91  bf 00 00 10 00          | mov $0x100000,%edi
	7c96  b9 00 00 02 00          | mov $0x20000,%ecx
	7c9b  31 c0                   | xor %eax,%eax
	7c9d  f3 48 ab                | rep stos %rax,%es:(%rdi)
	7ca0  66 ba f8 03             | mov $0x3f8,%dx
	7ca4  48 8d 35 57 00 00 00    | lea 0x57(%rip),%rsi
	7cab  e8 0a 00 00 00          | call 0x7cba
	# isa-debug-exit: QEMU quits with status (1<<1)|1 = 3.
	7cb0  66 ba f4 00             | mov $0xf4,%dx
	7cb4  b0 01                   | mov $0x1,%al
	7cb6  ee                      | out %al,(%dx)
	7cb7  f4                      | hlt
	7cb8  eb fd                   | jmp 0x7cb7
	# puts64:
	7cba  ac                      | lods %ds:(%rsi),%al
	7cbb  84 c0                   | test %al,%al
	7cbd  74 03                   | je 0x7cc2
	7cbf  ee                      | out %al,(%dx)
	7cc0  eb f8                   | jmp 0x7cba
	7cc2  c3                      | ret
	7cc3  0f 1f 44 00 00          | (padding to align the GDT)
	7cc8  00 00 00 00 00 00 00 00 | gdt: the null descriptor
	7cd0  00 00 00 00 00 9a 20 00 | selector 0x08: 64-bit code, present, ring 0
	7cd8  0f 00 c8 7c 00 00       | gdtr: limit 15, base 0x7cc8
`
