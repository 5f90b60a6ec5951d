package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// A data directory too deep for sockets puts the run directory at a
// predictable path in the shared temp dir: one that someone else made
// there first must be refused, not used.
func TestDefaultRunDirMustBePrivate(t *testing.T) {
	tmp := testvm.ShortTempDir(t)
	t.Setenv("TMPDIR", tmp)
	t.Setenv("XDG_RUNTIME_DIR", "")
	data := filepath.Join(testvm.ShortTempDir(t), strings.Repeat("d", maxSocketPath))
	run := defaultRunDir(data)
	if filepath.Dir(run) != tmp {
		t.Fatalf("run directory of a deep data directory = %s, want one under %s", run, tmp)
	}

	refused := func(t *testing.T, what string) {
		t.Helper()
		_, err := newLayout(data, "")
		if err == nil || !strings.Contains(err.Error(), run) || !strings.Contains(err.Error(), what) {
			t.Fatalf("newLayout = %v, want an error naming %s and saying %q", err, run, what)
		}
	}
	private := func(t *testing.T) {
		t.Helper()
		if _, err := newLayout(data, ""); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(run)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("run directory: %v, %v; want a directory with mode 0700", fi.Mode(), err)
		}
	}

	t.Run("made fresh", func(t *testing.T) {
		os.RemoveAll(run)
		private(t)
	})
	t.Run("ours but 0755 is narrowed to 0700", func(t *testing.T) {
		os.RemoveAll(run)
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(run, 0o755) // past the umask
		private(t)
	})
	t.Run("a symlink is refused", func(t *testing.T) {
		os.RemoveAll(run)
		target := t.TempDir()
		os.Chmod(target, 0o755)
		if err := os.Symlink(target, run); err != nil {
			t.Fatal(err)
		}
		refused(t, "symbolic link")
		if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o755 {
			t.Errorf("the symlink's target was changed to %v", fi.Mode())
		}
	})
	t.Run("a dangling symlink is refused", func(t *testing.T) {
		os.RemoveAll(run)
		if err := os.Symlink(filepath.Join(t.TempDir(), "nothing"), run); err != nil {
			t.Fatal(err)
		}
		_, err := newLayout(data, "")
		if err == nil || !strings.Contains(err.Error(), run) {
			t.Fatalf("newLayout = %v, want an error naming %s", err, run)
		}
	})
	t.Run("another user's is refused", func(t *testing.T) {
		os.RemoveAll(run)
		if os.Getuid() != 0 {
			t.Skip("needs root to give a directory to another uid")
		}
		if err := os.Mkdir(run, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(run, 0o777)
		if err := os.Chown(run, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refused(t, "owned by uid 65534")
		if fi, _ := os.Lstat(run); fi.Mode().Perm() != 0o777 {
			t.Errorf("another user's directory was changed to %v", fi.Mode())
		}
	})
	os.RemoveAll(run)
}
