package qemu

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// layout names every path the driver uses under its data directory:
//
//	templates/<name>.toml   a template and, beside it, its files
//	isos/*.iso              installer images
//	vms/<vmid>/vm.toml      one VM: its config, disks and serial log
//	<run>/<vmid>/*.sock     its QMP, guest agent and VNC sockets, pidfile
//
// Sockets live in a separate run directory because a unix socket path must
// fit in 108 bytes and a data directory can be deep.
type layout struct {
	data string
	run  string
}

// maxSocketPath leaves room under the kernel's 108-byte sun_path for the
// longest name we create ("<run>/<vmid>/qga.sock" with a 6-digit vmid).
const maxSocketPath = 107 - len("/999999/qga.sock")

func newLayout(dataDir, runDir string) (layout, error) {
	data, err := filepath.Abs(dataDir)
	if err != nil {
		return layout{}, fmt.Errorf("data directory %q: %w", dataDir, err)
	}
	run := runDir
	if run == "" {
		run = defaultRunDir(data)
	}
	if len(run) > maxSocketPath {
		return layout{}, fmt.Errorf("run directory %q is too long for unix sockets (%d bytes, at most %d)", run, len(run), maxSocketPath)
	}
	l := layout{data: data, run: run}
	for _, dir := range []string{l.templates(), l.isos(), filepath.Join(data, "vms")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return layout{}, fmt.Errorf("data directory: %w", err)
		}
	}
	if err := makePrivateDir(run, os.MkdirAll); err != nil {
		return layout{}, fmt.Errorf("run directory: %w", err)
	}
	return l, nil
}

// makePrivateDir creates dir (mode 0700) with mkdir, or accepts it when it
// exists and checkPrivateDir passes. The default run directory can be a
// predictable path in a shared temp dir: a directory someone else made
// there would let them plant symlinks where we put sockets and pidfiles.
func makePrivateDir(dir string, mkdir func(string, os.FileMode) error) error {
	if err := mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return checkPrivateDir(dir)
}

// checkPrivateDir requires dir to be a real directory (not a symlink) owned
// by our uid, and narrows its mode to 0700 when it is not.
func checkPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link, not a directory: refusing it, since whoever made it chooses where sockets go; remove it", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s): remove it", dir, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read its owner", dir)
	}
	if uid := os.Getuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s is owned by uid %d, not by this process's uid %d: refusing it, since its owner could plant symlinks in it; remove it or set another run directory", dir, st.Uid, uid)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%s has mode %04o and cannot be narrowed to 0700: %w", dir, fi.Mode().Perm(), err)
		}
	}
	return nil
}

// defaultRunDir is <data>/run when that is short enough for sockets, else a
// directory under the system's temp dir derived from the data directory, so
// a restarted driver finds the sockets of running VMs again.
func defaultRunDir(data string) string {
	run := filepath.Join(data, "run")
	if len(run) <= maxSocketPath {
		return run
	}
	sum := sha256.Sum256([]byte(data))
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" || len(base) > 60 {
		base = os.TempDir()
	}
	return filepath.Join(base, fmt.Sprintf("poligon-%d-%s", os.Getuid(), hex.EncodeToString(sum[:6])))
}

func (l layout) templates() string { return filepath.Join(l.data, "templates") }
func (l layout) isos() string      { return filepath.Join(l.data, "isos") }

func (l layout) vmDir(vmid int) string {
	return filepath.Join(l.data, "vms", strconv.Itoa(vmid))
}

func (l layout) vmConfig(vmid int) string { return filepath.Join(l.vmDir(vmid), "vm.toml") }
func (l layout) runDir(vmid int) string   { return filepath.Join(l.run, strconv.Itoa(vmid)) }
func (l layout) qmpSocket(vmid int) string {
	return filepath.Join(l.runDir(vmid), "qmp.sock")
}
func (l layout) qgaSocket(vmid int) string {
	return filepath.Join(l.runDir(vmid), "qga.sock")
}
func (l layout) vncSocket(vmid int) string {
	return filepath.Join(l.runDir(vmid), "vnc.sock")
}
func (l layout) pidfile(vmid int) string {
	return filepath.Join(l.runDir(vmid), "qemu.pid")
}
