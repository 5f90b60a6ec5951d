package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// qemuImg runs qemu-img and turns a failure into its own message.
func (d *Driver) qemuImg(ctx context.Context, args ...string) error {
	_, err := d.qemuImgOutput(ctx, args...)
	return err
}

func (d *Driver) qemuImgOutput(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, d.opts.QEMUImg, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("qemu-img %s: %s", args[0], lastLines(msg, 3))
	}
	return stdout.Bytes(), nil
}

// imageInfo is what qemu-img info --output=json tells us.
type imageInfo struct {
	Format      string         `json:"format"`
	VirtualSize int64          `json:"virtual-size"`
	ActualSize  int64          `json:"actual-size"`
	Snapshots   []snapshotInfo `json:"snapshots"`
}

type snapshotInfo struct {
	Name        string `json:"name"`
	VMStateSize int64  `json:"vm-state-size"` // 0: disks only
}

// imageInfo reads an image's metadata; -U lets it read an image a running
// QEMU holds locked.
func (d *Driver) imageInfo(ctx context.Context, path string) (imageInfo, error) {
	out, err := d.qemuImgOutput(ctx, "info", "-U", "--output=json", path)
	if err != nil {
		return imageInfo{}, err
	}
	var info imageInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return imageInfo{}, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	return info, nil
}

func (d *Driver) imageFormat(ctx context.Context, path string) (string, error) {
	info, err := d.imageInfo(ctx, path)
	return info.Format, err
}

// allocatedSize is the space a copy of path takes (blocks, not the apparent
// size of a sparse file).
func allocatedSize(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// checkFree refuses an operation that needs more space than dir's
// filesystem has, with 64 MiB to spare, before anything is written.
func checkFree(dir string, need int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	free := int64(st.Bavail) * st.Bsize
	const margin = 64 << 20
	if need+margin > free {
		return fmt.Errorf("not enough disk space: it needs %s (plus %s to spare), %s is free in %s",
			humanBytes(need), humanBytes(margin), humanBytes(free), dir)
	}
	return nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}

// copyFile copies src to dst, removing dst again when the copy fails (a
// full disk must not leave half a file behind).
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	_, err = io.Copy(out, in)
	return err
}
