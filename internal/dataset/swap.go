package dataset

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// swapIn replaces out with the finished export in tmp (a sibling, so on
// the same volume): out moves aside, tmp takes its name, the old one is
// deleted. Until the first rename out is untouched; if the second fails,
// out is put back.
func swapIn(tmp, out string) error {
	old := ""
	if _, err := os.Lstat(out); err == nil {
		old = tmp + ".old"
		if err := os.Rename(out, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, out); err != nil {
		if old != "" {
			os.Rename(old, out)
		}
		return err
	}
	if err := syncDir(filepath.Dir(out)); err != nil {
		return err
	}
	if old != "" {
		return os.RemoveAll(old)
	}
	return nil
}

// syncTree syncs every directory under root (the files are synced as they
// are written), so the whole export is on disk before it is swapped in.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return syncDir(p)
	})
}

// writeTar packs the export in dir into a temporary file beside dst,
// gzipped when dst ends in .gz or .tgz, and answers its path: renamed to
// dst once the export is swapped in. Only the export's regular files go
// in, under their relative paths, with plain modes and no owners.
func writeTar(dir, dst string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".export-")
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	var w io.Writer = f
	var gz *gzip.Writer
	if strings.HasSuffix(dst, ".gz") || strings.HasSuffix(dst, ".tgz") {
		gz = gzip.NewWriter(f)
		w = gz
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: st.ModTime()}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		case !st.Mode().IsRegular():
			return errors.New("export: " + rel + " is not a regular file") // never written by Export
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil && gz != nil {
		err = gz.Close()
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
