// Package images carries the template build recipes (images/<name>/build.sh
// and the files it reads) inside the binary, so `poligon image NAME` works
// from the binary alone: a container image or a `go install` has no source
// tree.
package images

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

//go:embed tiny tiny-x debian debian-desktop
var recipes embed.FS

// Names lists the templates the binary can build, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(recipes, ".")
	var names []string
	for _, e := range entries {
		if _, err := fs.Stat(recipes, e.Name()+"/build.sh"); err == nil {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// Extract writes every recipe under dir and returns the path of NAME's
// build.sh. All recipes are written because one may read another's files
// (tiny-x uses tiny's lib.sh and rootfs). A file whose content is already
// there is left alone: the build's quick stamp reads mtimes, and a rewrite
// would make an unchanged build ask apt again. embed keeps no file modes,
// so a file starting with "#!" is made executable: the recipes' scripts all
// do, and nothing else in them is executable.
func Extract(dir, name string) (string, error) {
	if !slices.Contains(Names(), name) {
		return "", fmt.Errorf("no template %q in this binary (it has %v)", name, Names())
	}
	err := fs.WalkDir(recipes, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := recipes.ReadFile(p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if bytes.HasPrefix(data, []byte("#!")) {
			mode = 0o755
		}
		return writeIfChanged(dst, data, mode)
	})
	if err == nil {
		err = prune(dir)
	}
	if err != nil {
		return "", fmt.Errorf("writing the build recipes under %s: %w", dir, err)
	}
	return filepath.Join(dir, name, "build.sh"), nil
}

// prune removes what an older binary left under dir: a build copies whole
// rootfs directories, so a stale file would end up in the image.
func prune(dir string) error {
	var stale []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if _, err := fs.Stat(recipes, filepath.ToSlash(rel)); err != nil {
			stale = append(stale, p)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	for _, p := range stale {
		if err == nil {
			err = os.RemoveAll(p)
		}
	}
	return err
}

func writeIfChanged(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == mode {
			return nil
		}
		return os.Chmod(path, mode)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile's mode is cut by the umask
		return err
	}
	return os.Rename(tmp, path)
}
