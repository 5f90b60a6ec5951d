// Package testvm gives tests a data directory with the tiny template, built
// once per machine from Debian packages by images/tiny/build.sh and shared
// by every test package (the build is locked, so parallel packages wait for
// one build instead of racing).
package testvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// Root answers the repository root.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// cacheDir holds the built template between test runs (gitignored).
func cacheDir() string {
	if dir := os.Getenv("POLIGON_TEST_CACHE"); dir != "" {
		return dir
	}
	return filepath.Join(Root(), ".cache", "test-data")
}

// RequireQEMU skips the test when QEMU is not installed.
func RequireQEMU(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (apt-get install qemu-system-x86 qemu-utils): skipping a test that boots a VM", bin)
		}
	}
}

// TemplatesDir builds the tiny template if needed and answers the templates
// directory that holds tiny.toml.
func TemplatesDir(t testing.TB) string {
	t.Helper()
	RequireQEMU(t)
	cache := cacheDir()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	cmd := exec.Command(filepath.Join(Root(), "images", "tiny", "build.sh"), cache)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("building the tiny template failed: %v\n%s", err, out)
	}
	return filepath.Join(cache, "templates")
}

// DataDir answers a fresh data directory whose templates/ holds the tiny
// template (linked, not copied).
func DataDir(t testing.TB) string {
	t.Helper()
	src := TemplatesDir(t)
	data := ShortTempDir(t)
	tpl := filepath.Join(data, "templates")
	if err := os.MkdirAll(tpl, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(tpl, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

// ShortTempDir is a temp dir with a short path, so unix sockets under it fit
// in 108 bytes (t.TempDir names can be long).
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "testvm: cleanup:", err)
		}
	})
	return dir
}
