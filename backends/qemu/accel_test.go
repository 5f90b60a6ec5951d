package qemu

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/testvm"
)

// fakeProbe answers p and counts its calls.
type fakeProbe struct {
	p     kvmProbe
	calls int
}

func (f *fakeProbe) probe(string) kvmProbe { f.calls++; return f.p }

var (
	probeOK     = kvmProbe{cause: probeRan, reason: "probe guest ran in 41 ms", took: 41 * time.Millisecond}
	probeFailed = kvmProbe{cause: probeSilent, reason: "/dev/kvm opens but a KVM guest printed nothing in 3 s", took: 3 * time.Second}
)

func TestResolveAccel(t *testing.T) {
	for _, c := range []struct {
		requested string
		probe     kvmProbe
		want      string // Accel.String(), or the error's start
		probes    int
		fails     bool
	}{
		{"", probeOK, "kvm (auto: probe guest ran in 41 ms)", 1, false},
		{"auto", probeOK, "kvm (auto: probe guest ran in 41 ms)", 1, false},
		{"auto", probeFailed, "tcg (auto: /dev/kvm opens but a KVM guest printed nothing in 3 s)", 1, false},
		{"kvm", probeOK, "kvm (kvm: probe guest ran in 41 ms)", 1, false},
		{"kvm", probeFailed, `accel = "kvm", but KVM cannot run a guest here: /dev/kvm opens but a KVM guest printed nothing in 3 s; set accel = "tcg" (or POLIGON_ACCEL=tcg)`, 1, true},
		{"tcg", probeOK, "tcg (tcg: asked for, KVM not probed)", 0, false},
		{"tcg", probeFailed, "tcg (tcg: asked for, KVM not probed)", 0, false},
		{"KVM", probeOK, `accel "KVM": use auto, kvm or tcg`, 0, true},
	} {
		f := &fakeProbe{p: c.probe}
		a, err := resolveAccel("", c.requested, f.probe)
		got := a.String()
		if err != nil {
			got = err.Error()
		}
		if (err != nil) != c.fails || !strings.HasPrefix(got, c.want) || f.calls != c.probes {
			t.Errorf("%q with probe %v: %q (error %v), %d probes; want %q, %d probes", c.requested, c.probe.ok(), got, err != nil, f.calls, c.want, c.probes)
		}
		if err == nil && a.Probe != time.Duration(c.probes)*c.probe.took {
			t.Errorf("%q: probe time %v", c.requested, a.Probe)
		}
	}
}

// TestNewAccel: the driver keeps the decision, uses it on the command
// line, says why in one log line when auto falls back, and refuses a kvm
// it cannot have.
func TestNewAccel(t *testing.T) {
	vm := vmConfig{VMID: 100, Name: "x", MemoryMB: 64, Cores: 2}
	for _, c := range []struct {
		requested string
		probe     kvmProbe
		mode      string
		args      string // in the QEMU command line
		logged    bool
	}{
		{"", probeOK, "kvm", "-accel kvm", false},
		{"", probeFailed, "tcg", "-accel tcg,thread=multi", true},
		{"kvm", probeOK, "kvm", "-accel kvm", false},
		{"tcg", probeOK, "tcg", "-accel tcg,thread=multi", false},
	} {
		var log testvm.SyncBuffer
		f := &fakeProbe{p: c.probe}
		d, err := New(Options{DataDir: testvm.ShortTempDir(t), Accel: c.requested, probe: f.probe, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatalf("%q: %v", c.requested, err)
		}
		cmdline := strings.Join(d.qemuArgs(vm, ""), " ")
		if d.Accel() != c.mode || d.AccelInfo().Mode != c.mode || !strings.Contains(cmdline, c.args+" ") ||
			strings.Contains(cmdline, "-cpu host") != (c.mode == "kvm") {
			t.Errorf("%q: accel %v, command line %s", c.requested, d.AccelInfo(), cmdline)
		}
		if logged := strings.Contains(log.String(), "reason="); logged != c.logged || strings.Count(log.String(), "\n") > 1 {
			t.Errorf("%q: log %q", c.requested, log.String())
		}
		if c.logged && !strings.Contains(log.String(), "printed nothing in 3 s") {
			t.Errorf("%q: the log line does not say why: %q", c.requested, log.String())
		}
		d.Close()
	}
	_, err := New(Options{DataDir: testvm.ShortTempDir(t), Accel: "kvm", probe: (&fakeProbe{p: probeFailed}).probe})
	if err == nil || !strings.Contains(err.Error(), `KVM cannot run a guest here: /dev/kvm opens but a KVM guest printed nothing`) ||
		!strings.Contains(err.Error(), `accel = "tcg"`) || !strings.Contains(err.Error(), "POLIGON_ACCEL=tcg") {
		t.Errorf("forced kvm without KVM: %v", err)
	}
	if _, err := New(Options{DataDir: testvm.ShortTempDir(t), Accel: "fast"}); err == nil || !strings.Contains(err.Error(), `accel "fast"`) {
		t.Errorf("a bad accel: %v", err)
	}
}

func TestProbeSector(t *testing.T) {
	s := probeSector()
	if len(s) != 512 || s[510] != 0x55 || s[511] != 0xaa {
		t.Fatalf("not a boot sector: %d bytes, ends % x", len(s), s[len(s)-2:])
	}
	// The code points at its first marker (mov $0x7cde,%si) and at the
	// GDT (lgdtl 0x7cd8 -> base 0x7cc8); they must be where it says.
	if !bytes.HasPrefix(s[0xde:], []byte(markReal+"\x00"+markLong+"\x00"+markDone+"\x00")) {
		t.Errorf("markers not at 0x7cde: %q", s[0xde:0x110])
	}
	if !bytes.Equal(s[0xd8:0xde], []byte{0x0f, 0x00, 0xc8, 0x7c, 0, 0}) || !bytes.Equal(s[0xd0:0xd8], []byte{0, 0, 0, 0, 0, 0x9a, 0x20, 0}) {
		t.Errorf("gdt: % x", s[0xc8:0xde])
	}
	for _, bad := range []string{"7c00  fa\n7c02  31 c0 | a byte lost", "7c00  fz | not hex"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("assemble(%q) did not panic", bad)
				}
			}()
			assemble(bad)
		}()
	}
}

// TestProbeGuestUnderTCG: the guest itself is sound (so when it does not
// finish under KVM, KVM is at fault). The deadline is generous: this checks
// the guest, not the machine's speed.
func TestProbeGuestUnderTCG(t *testing.T) {
	testvm.RequireQEMU(t)
	p := runProbeGuest(qemuPath(t), []string{"-accel", "tcg"}, 2*time.Minute)
	if !p.ok() || !strings.HasPrefix(p.reason, "probe guest ran in ") {
		t.Fatalf("the probe guest under TCG: %+v", p)
	}
	t.Logf("under TCG: %s", p.reason)
}

// TestProbeClassifies: each way a probe can end gets its own reason.
func TestProbeClassifies(t *testing.T) {
	testvm.RequireQEMU(t)
	qemu := qemuPath(t)
	dir := t.TempDir()
	// A stand-in QEMU that prints what a stuck guest would and hangs.
	fake := func(name, serial string) string {
		path := filepath.Join(dir, name)
		script := "#!/bin/sh\nprintf '" + serial + "'\nexec sleep 600\n"
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		name  string
		bin   string
		args  []string
		cause probeCause
		want  string
	}{
		{"refused", qemu, []string{"-accel", "nosuch"}, probeRefused, "qemu refused KVM: -accel nosuch: invalid accelerator nosuch"},
		// -S: the CPU never starts, so nothing is printed, however fast.
		{"silent", qemu, []string{"-accel", "tcg", "-S"}, probeSilent, "printed nothing in 1 s"},
		{"no-long-mode", fake("real", markReal), nil, probeStalled, "did not reach 64-bit mode in 3 s"},
		{"slow", fake("long", markReal+markLong), nil, probeStalled, "runs too slowly: 200M loop turns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			deadline := probeDeadline
			if c.cause == probeSilent {
				deadline = time.Second
			}
			p := runProbeGuest(c.bin, c.args, deadline)
			if p.cause != c.cause || !strings.Contains(p.reason, c.want) {
				t.Fatalf("%+v, want cause %d with %q", p, c.cause, c.want)
			}
			t.Log(p.reason)
		})
	}
	t.Run("devices", func(t *testing.T) {
		for _, c := range []struct {
			dev, qemu string
			cause     probeCause
			want      string
		}{
			{filepath.Join(dir, "nosuch"), qemu, probeNoDevice, "no " + filepath.Join(dir, "nosuch")},
			{dir, qemu, probeNoAccess, "cannot open " + dir + ": is a directory"},
			{os.DevNull, filepath.Join(dir, "no-qemu"), probeNoQEMU, filepath.Join(dir, "no-qemu") + " not found: KVM not probed"},
		} {
			if p := probeKVM(c.dev, c.qemu); p.cause != c.cause || p.reason != c.want {
				t.Errorf("probeKVM(%s, %s) = %+v, want %q", c.dev, c.qemu, p, c.want)
			}
		}
	})
}

// TestKVMProbeOnThisMachine runs the real probe and checks its decision
// against what the machine does, whatever it has: with KVM, the tiny
// template boots under -accel kvm; without, the reason is a known one and
// the machine's state agrees with it.
func TestKVMProbeOnThisMachine(t *testing.T) {
	testvm.RequireQEMU(t)
	a, err := ResolveAccel("", "auto")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("accel: %s; the probe took %v", a, a.Probe.Round(time.Millisecond))
	p := probeKVMOnce("qemu-system-x86_64")
	if p.reason != a.Reason || p.ok() != (a.Mode == AccelKVM) || a.Requested != AccelAuto {
		t.Fatalf("the decision %v disagrees with the probe %+v", a, p)
	}
	_, statErr := os.Stat("/dev/kvm")
	switch p.cause {
	case probeRan:
		if _, err := New(Options{DataDir: testvm.ShortTempDir(t), Accel: "kvm"}); err != nil {
			t.Fatalf("the probe ran but a forced kvm fails: %v", err)
		}
		d := newDriverAccel(t, testvm.DataDir(t), "kvm")
		vmid := bootTiny(t, d, "test-kvm-probe")
		pid, ok := d.pid(vmid)
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if !ok || err != nil || !bytes.Contains(cmdline, []byte("\x00-accel\x00kvm\x00")) || !bytes.Contains(cmdline, []byte("\x00-cpu\x00host\x00")) {
			t.Fatalf("the VM did not run with -accel kvm -cpu host: %q %v", cmdline, err)
		}
	case probeNoDevice:
		if statErr == nil {
			t.Fatalf("probe says %q but /dev/kvm exists", p.reason)
		}
	case probeNoAccess:
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err == nil {
			f.Close()
			t.Fatalf("probe says %q but /dev/kvm opens", p.reason)
		}
	case probeRefused, probeSilent, probeStalled:
		// /dev/kvm opened, QEMU started, and the guest did not finish
		// under KVM; TestProbeGuestUnderTCG shows the guest is sound.
		if statErr != nil || !strings.Contains(p.reason, "KVM") || p.took == 0 {
			t.Fatalf("probe %+v, /dev/kvm: %v", p, statErr)
		}
		if _, err := New(Options{DataDir: testvm.ShortTempDir(t), Accel: "kvm"}); err == nil || !strings.Contains(err.Error(), p.reason) {
			t.Fatalf("a forced kvm here: %v", err)
		}
	default:
		t.Fatalf("an unknown reason: %+v", p)
	}
	// Once per process: a second driver gets the same answer, down to the
	// nanoseconds the probe took.
	if again := probeKVMOnce("qemu-system-x86_64"); again != p {
		t.Fatalf("probed again: %+v then %+v", p, again)
	}
}

func newDriverAccel(t *testing.T, data, accel string) *Driver {
	t.Helper()
	d, err := New(Options{DataDir: data, Accel: accel, StopGrace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func qemuPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip(err)
	}
	return p
}
