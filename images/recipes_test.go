package images

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The embedded recipes are the source tree's, byte for byte and with its
// executable bits, so a build from the binary is the build from the tree.
func TestExtractMatchesTheSourceTree(t *testing.T) {
	dir := t.TempDir()
	script, err := Extract(dir, "tiny-x")
	if err != nil {
		t.Fatal(err)
	}
	if script != filepath.Join(dir, "tiny-x", "build.sh") {
		t.Errorf("script = %s", script)
	}
	files := 0
	for _, name := range []string{"tiny", "tiny-x", "debian", "debian-desktop"} {
		err := filepath.WalkDir(name, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			files++
			want, _ := os.ReadFile(p)
			got, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil {
				t.Errorf("%s not extracted: %v", p, err)
				return nil
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the source tree", p)
			}
			src, _ := os.Stat(p)
			dst, _ := os.Stat(filepath.Join(dir, p))
			if src.Mode().Perm()&0o100 != dst.Mode().Perm()&0o100 {
				t.Errorf("%s: mode %v, the source tree has %v", p, dst.Mode(), src.Mode())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 20 {
		t.Errorf("only %d files compared", files)
	}
}

// A second extraction rewrites nothing (the build's quick stamp reads
// mtimes) and removes what the binary no longer has.
func TestExtractKeepsUnchangedFilesAndPrunesStaleOnes(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir, "tiny"); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "tiny", "lib.sh")
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(lib, old, old); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "tiny", "rootfs", "etc", "stale.conf")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(dir, "tiny", "init")
	if err := os.WriteFile(edited, []byte("#!/bin/sh\necho edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(dir, "tiny"); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(lib); !st.ModTime().Equal(old) {
		t.Errorf("lib.sh was rewritten: mtime %v, want %v", st.ModTime(), old)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a stale file survived: %v", err)
	}
	if b, _ := os.ReadFile(edited); strings.Contains(string(b), "edited") {
		t.Error("an edited file was not restored")
	}
}

func TestExtractUnknownTemplate(t *testing.T) {
	dir := t.TempDir()
	if _, err := Extract(dir, "windows"); err == nil || !strings.Contains(err.Error(), "tiny-x") {
		t.Errorf("err = %v, want the list of templates", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused extraction wrote %d entries", len(entries))
	}
}
