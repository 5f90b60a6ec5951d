package hostapi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const evidenceHint = "path is relative to the evidence directory (or an absolute path inside it); .. and symlinks may not lead out"

// EvidencePath resolves path inside the evidence directory dir and refuses
// anything that could write elsewhere: an empty dir (no evidence directory
// configured), "..", an absolute path outside dir, and a symlink anywhere on
// the way (the file itself or any parent below dir). Parents that do not
// exist yet are fine: SaveEvidence creates them.
func EvidencePath(dir, path string) (string, error) {
	if dir == "" {
		return "", Failf("the operator sets the evidence directory (--evidence-dir or POLIGON_MCP_EVIDENCE); call without path for an image-only answer",
			"this server has no evidence directory: path is refused")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if path == "" {
		return "", Failf(evidenceHint, "path is empty")
	}
	for _, part := range strings.Split(filepath.ToSlash(path), "/") {
		if part == ".." {
			return "", Failf(evidenceHint, "path %q leaves the evidence directory (..)", path)
		}
	}
	full := path
	if !filepath.IsAbs(full) {
		full = filepath.Join(root, path)
	}
	full = filepath.Clean(full)
	rel, err := filepath.Rel(root, full)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", Failf(evidenceHint, "path %q is outside the evidence directory", path)
	}
	// No symlink on the way down: a link could point anywhere.
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", Failf(evidenceHint, "path %q goes through a symlink (%s)", path, cur)
		}
	}
	return full, nil
}

// SaveEvidence writes data to path inside the evidence directory and
// answers where, relative to it.
func SaveEvidence(dir, path string, data []byte) (string, error) {
	full, err := EvidencePath(dir, path)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(full); err == nil && fi.IsDir() {
		return "", Failf(evidenceHint, "path %q is a directory: name a file", path)
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return "", Failf(evidenceHint, "path %q: cannot make its directory", path)
	}
	// Write beside and rename: a reader never sees half a PNG, and a symlink
	// planted at the target after the check is replaced, not followed.
	tmp, err := os.CreateTemp(filepath.Dir(full), ".evidence-*")
	if err != nil {
		return "", fmt.Errorf("evidence directory: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	os.Chmod(tmp.Name(), 0o644)
	if err := os.Rename(tmp.Name(), full); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	root, _ := filepath.Abs(dir)
	rel, _ := filepath.Rel(root, full)
	return rel, nil
}

// SaveShot saves a frame as a full-size PNG in the evidence directory.
func (c *Caller) SaveShot(f Frame, path string) (string, error) {
	if _, err := EvidencePath(c.env.Evidence, path); err != nil {
		return "", err
	}
	data, _, err := f.PNG(1)
	if err != nil {
		return "", err
	}
	return SaveEvidence(c.env.Evidence, path, data)
}
