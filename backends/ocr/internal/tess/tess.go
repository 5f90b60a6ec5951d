// Package tess is a thin wrapper over libtesseract's C API, loaded with
// dlopen when first needed rather than linked: a machine without the
// library still runs poligon (only OCR answers "not installed"), and
// OMP_THREAD_LIMIT=1 is in the environment before libgomp reads it, which
// happens once, when the library loads (set later, it is ignored and
// tesseract runs 4-12x slower on 2 cores: vision.md §1.2).
package tess

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/poligon/poligon/backends"
)

// ErrUnavailable wraps every reason OCR cannot run here: no cgo in this
// build, no library, no language data.
var ErrUnavailable = backends.ErrOCRUnavailable

// Library is the soname loaded (Debian 12: libtesseract5 5.3).
const Library = "libtesseract.so.5"

// DataDir answers where the language data is: TESSDATA_PREFIX, else
// Debian's directory.
func DataDir() string {
	if d := os.Getenv("TESSDATA_PREFIX"); d != "" {
		return d
	}
	return "/usr/share/tesseract-ocr/5/tessdata"
}

// CheckLanguages answers which of langs ("rus+eng") have no traineddata in
// dir, as one error naming the Debian packages that bring them.
func CheckLanguages(dir, langs string) error {
	var missing, pkgs []string
	for _, l := range strings.Split(langs, "+") {
		if l == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, l+".traineddata")); err != nil {
			missing = append(missing, l)
			pkgs = append(pkgs, "tesseract-ocr-"+l)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: no tesseract language data for %s in %s (install %s)",
		ErrUnavailable, strings.Join(missing, "+"), dir, strings.Join(pkgs, " "))
}

// findLibrary answers whether Library is where the dynamic loader would
// look (LD_LIBRARY_PATH, the directories /etc/ld.so.conf names, the
// system's own), without loading it: loading maps the library and its
// dependencies into the process for good.
func findLibrary() error {
	var dirs []string
	for _, d := range strings.Split(os.Getenv("LD_LIBRARY_PATH"), ":") {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	dirs = append(dirs, ldConfDirs("/etc/ld.so.conf", 0)...)
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, Library)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is not in the library path (LD_LIBRARY_PATH, /etc/ld.so.conf, /usr/lib) (install libtesseract5 and tesseract-ocr)", ErrUnavailable, Library)
}

// ldConfDirs reads the directories of an ld.so.conf file and the files it
// includes.
func ldConfDirs(path string, depth int) []string {
	f, err := os.Open(path)
	if err != nil || depth > 4 {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "include") && len(line) > 7 && (line[7] == ' ' || line[7] == '\t'):
			for _, pat := range strings.Fields(line[8:]) {
				if !filepath.IsAbs(pat) {
					pat = filepath.Join(filepath.Dir(path), pat)
				}
				files, _ := filepath.Glob(pat)
				for _, inc := range files {
					dirs = append(dirs, ldConfDirs(inc, depth+1)...)
				}
			}
		case strings.HasPrefix(line, "/"):
			dirs = append(dirs, line)
		}
	}
	return dirs
}
