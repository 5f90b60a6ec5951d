package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// TestConfigCheckAccel: config check shows the accelerator each qemu bench
// gets, from the KVM probe when it runs, and a kvm it cannot have is an
// error that says what to set instead.
func TestConfigCheckAccel(t *testing.T) {
	e := env(t, testvm.ShortTempDir(t))
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte("accel = \"tcg\"\n[[bench]]\nname = \"lab\"\ntype = \"qemu\"\n[[bench]]\nname = \"probed\"\ntype = \"qemu\"\naccel = \"auto\"\n"), 0o600)
	out, errOut, code := poligon(t, e, "config", "check", "--config", cfg)
	auto := regexp.MustCompile(`(?m)^# bench "probed": accel (kvm \(auto: probe guest ran in \d+ ms\)|tcg \(auto: .+\))$`)
	if code != 0 || !strings.Contains(out, `# bench "lab": accel tcg (tcg: asked for, KVM not probed)`+"\n") || !auto.MatchString(out) {
		t.Fatalf("config check = exit %d:\n%s%s", code, out, errOut)
	}
	t.Log(auto.FindString(out))

	out, errOut, code = poligon(t, append(e, "POLIGON_ACCEL=kvm"), "config", "check")
	switch code {
	case 0:
		if !regexp.MustCompile(`(?m)^# bench "local": accel kvm \(kvm: probe guest ran in \d+ ms\)$`).MatchString(out) {
			t.Fatalf("a kvm that works:\n%s", out)
		}
	case 2:
		if !strings.Contains(errOut, `error: bench "local": accel = "kvm", but KVM cannot run a guest here: `) || !strings.Contains(errOut, "POLIGON_ACCEL=tcg") {
			t.Fatalf("a kvm that cannot be had: %s", errOut)
		}
	default:
		t.Fatalf("POLIGON_ACCEL=kvm: exit %d:\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "# POLIGON_ACCEL from the env") {
		t.Errorf("the source of accel is not shown:\n%s", out)
	}
}
