package dataset

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestConfined(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "s"), 0o755))
	must(os.WriteFile(filepath.Join(root, "s/a-shot-0001.png"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret.png"), []byte("x"), 0o644))
	must(os.Symlink(filepath.Join(outside, "secret.png"), filepath.Join(root, "s/a-shot-0002.png")))
	must(os.Symlink("a-shot-0001.png", filepath.Join(root, "s/a-shot-0003.png"))) // stays inside, still refused
	must(os.Symlink(outside, filepath.Join(root, "linked")))
	must(os.Mkdir(filepath.Join(root, "s/dir.png"), 0o755))

	if p, err := confined(root, "s/a-shot-0001.png", PNGSuffix); err != nil || p != filepath.Join(root, "s/a-shot-0001.png") {
		t.Fatalf("a plain path: %q %v", p, err)
	}
	for _, rel := range []string{"/etc/passwd.png", filepath.Join(root, "s/a-shot-0001.png"), "../x.png", "s/../../x.png",
		"s/./a-shot-0001.png", "s//a-shot-0001.png", "s/a-shot-0002.png", "s/a-shot-0003.png", "linked/secret.png",
		"s/a-shot-0001.atspi.json", "s/dir.png", "", "s\\a.png"} {
		_, err := confined(root, rel, PNGSuffix)
		var r *refusal
		if !errors.As(err, &r) {
			t.Errorf("%q: %v, want a refusal", rel, err)
		}
	}
	if _, err := confined(root, "s/a-shot-0009.png", PNGSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := confined(root, "s/a-shot-0001.png/x.png", PNGSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file as a directory: %v", err)
	}
}

func TestWithinAndRealPath(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{{"/a/b", "/a/b", true}, {"/a/b/c", "/a/b", true}, {"/a/bc", "/a/b", false}, {"/a", "/a/b", false}, {"/a/b", "/", true}, {"/a/..b", "/a", true}} {
		if got := within(c.path, c.dir); got != c.want {
			t.Errorf("within(%s, %s) = %v", c.path, c.dir, got)
		}
	}
	dir := t.TempDir()
	os.Symlink(dir, filepath.Join(dir, "link"))
	got, err := realPath(filepath.Join(dir, "link", "not", "yet"))
	real, _ := filepath.EvalSymlinks(dir)
	if err != nil || got != filepath.Join(real, "not", "yet") {
		t.Fatalf("realPath: %q %v", got, err)
	}
}
