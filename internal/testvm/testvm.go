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
	"strings"
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

// TemplatesDir builds the tiny template (and the others named: "tiny-x",
// "debian") if needed and answers the templates directory that holds them.
// The debian templates build as root: without it the test is skipped.
func TemplatesDir(t testing.TB, more ...string) string {
	t.Helper()
	RequireQEMU(t)
	cache := cacheDir()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range more {
		if strings.HasPrefix(name, "debian") && os.Geteuid() != 0 {
			t.Skipf("the %s template builds as root (mmdebstrap --mode=root): skipping a test that boots it", name)
		}
	}
	for _, name := range append([]string{"tiny"}, more...) {
		build(t, cache, name)
	}
	return filepath.Join(cache, "templates")
}

// build runs NAME's recipe into cache under a lock per template, so
// parallel test packages wait for one build instead of racing. (The debian
// templates share a package cache; their recipe serialises its use.)
func build(t testing.TB, cache, name string) {
	t.Helper()
	if err := buildLocked(cache, name); err != nil {
		t.Fatal(err)
	}
}

func buildLocked(cache, name string) error {
	lock, err := os.OpenFile(filepath.Join(cache, ".lock-"+name), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	cmd := exec.Command(filepath.Join(Root(), "images", name, "build.sh"), cache)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the %s template failed: %v\n%s", name, err, out)
	}
	return nil
}

// Prebuild builds the templates named, one after the other, for a test
// binary to start in the background from TestMain: a real guest's build
// takes minutes, which then pass beside the tests that need only tiny,
// and a test that boots one waits (on the template's lock) for the build
// under way rather than starting its own. A build that fails is left for
// the test that needs the template to run again and report. It does
// nothing where a test would skip: as a non-root user or without QEMU.
func Prebuild(names ...string) {
	if os.Geteuid() != 0 {
		return
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return
	}
	cache := cacheDir()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return
	}
	for _, name := range names {
		if err := buildLocked(cache, name); err != nil {
			fmt.Fprintln(os.Stderr, "testvm: prebuild:", strings.SplitN(err.Error(), "\n", 2)[0])
		}
	}
}

// DataDir answers a fresh data directory whose templates/ holds the tiny
// template (and the others named), linked, not copied.
func DataDir(t testing.TB, more ...string) string {
	t.Helper()
	src := TemplatesDir(t, more...)
	data := ShortTempDir(t)
	tpl := filepath.Join(data, "templates")
	if err := os.MkdirAll(tpl, 0o755); err != nil {
		t.Fatal(err)
	}
	// Only the templates asked for: a test lists what it expects.
	for _, name := range append([]string{"tiny"}, more...) {
		for _, e := range []string{name + ".toml", name} {
			if err := os.Symlink(filepath.Join(src, e), filepath.Join(tpl, e)); err != nil {
				t.Fatal(err)
			}
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
