package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/ocr"
	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/internal/testvm"
)

var reportLine = regexp.MustCompile(`^(ok   |FAIL |skip )\S|^(all \d+ checks passed|\d+ of \d+ checks failed)$`)

// lineWith answers the report line that starts with prefix.
func lineWith(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Errorf("no line starting %q in:\n%s", prefix, out)
	return ""
}

// TestDoctorHere: the report tells the truth about this machine, as the
// backends themselves find it.
func TestDoctorHere(t *testing.T) {
	e := env(t, testvm.ShortTempDir(t))
	e = append(e, "POLIGON_STATE=/dev/null/state") // not a directory: must fail
	out, errOut, code := poligon(t, e, "doctor")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !reportLine.MatchString(l) {
			t.Errorf("a line that is not ok/FAIL/skip: %q", l)
		}
	}
	if code != 1 || !strings.Contains(out, "FAIL state_dir /dev/null/state: ") {
		t.Errorf("an impossible state_dir: exit %d\n%s%s", code, out, errOut)
	}

	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		lineWith(t, out, "FAIL qemu-system-x86_64: not found: install Debian's qemu-system-x86")
	} else {
		lineWith(t, out, "ok   qemu-system-x86_64 ")
		acc, err := qemu.ResolveAccel("", "auto")
		if err != nil {
			t.Fatal(err)
		}
		// The same finding, not the same timing: a loaded machine's KVM
		// guest may print nothing one time and stall the next.
		line := lineWith(t, out, "ok   accelerator: ")
		cause := strings.Join(strings.Fields(acc.Reason)[:2], " ") // "/dev/kvm opens", "no /dev/kvm", "probe guest"
		if !strings.HasPrefix(line, "ok   accelerator: "+acc.Mode) || !strings.Contains(line, "auto: "+cause) {
			t.Errorf("accelerator line %q, but the probe here says %s", line, acc)
		}
	}
	if err := ocr.New(ocr.Config{}).Available(); err != nil {
		lineWith(t, out, "FAIL OCR")
	} else {
		lineWith(t, out, "ok   OCR: libtesseract and the language data for rus+eng")
	}
	for _, f := range ovmfFiles {
		if _, err := os.Stat(f); err != nil {
			lineWith(t, out, "FAIL OVMF")
		}
	}
	lineWith(t, out, "ok   evidence_dir ")
	lineWith(t, out, "ok   bench local (qemu): ")
}

// blackHole accepts connections and never answers on them.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestDoctorBrokenBenches: a bench on a closed port fails at once, one
// that never answers fails at the deadline; neither holds up the report.
func TestDoctorBrokenBenches(t *testing.T) {
	hole, closed := blackHole(t), closedPort(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	token := "alice@pve!doctor=00000000-0000-4000-8000-000000000001"
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
[[bench]]
name = "closed"
type = "pve"
api = "https://%s/api2/json"
token = %q

[[bench]]
name = "hole"
type = "pve"
api = "https://%s/api2/json"
token = %q

[[bench]]
name = "kvm"
type = "pikvm"
api = "https://%s"
user = "admin"
password_env = "KVM_PASSWORD"
`, closed, token, hole, token, hole)), 0o600)
	e := append(env(t, testvm.ShortTempDir(t)), "KVM_PASSWORD=not-shown-0123456789")
	// The deadline guards against a hang; the doctor's own bound is 2 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binaryPath, "doctor", "--config", cfg, "--timeout", "2s")
	cmd.Env = e
	b, err := cmd.CombinedOutput()
	out := string(b)
	if ctx.Err() != nil {
		t.Fatalf("doctor did not finish with a black-hole bench:\n%s", out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("doctor with broken benches: %v, want exit 1\n%s", err, out)
	}
	if l := lineWith(t, out, "FAIL bench closed (pve): "); !strings.Contains(l, "connection refused") {
		t.Errorf("closed port: %q", l)
	}
	lineWith(t, out, "FAIL bench hole (pve): no answer from "+hole+" in 2s")
	lineWith(t, out, "FAIL bench kvm (pikvm): ")
	lineWith(t, out, "FAIL certificate of "+hole+" (bench hole): no TLS handshake before the deadline")
	lineWith(t, out, "FAIL certificate of "+closed+" (bench closed): ")
	lineWith(t, out, "skip QEMU: no qemu bench configured")
	for _, secret := range []string{"00000000-0000-4000-8000-000000000001", "not-shown-0123456789"} {
		if strings.Contains(out, secret) {
			t.Errorf("a secret in the doctor's report:\n%s", out)
		}
	}
}
