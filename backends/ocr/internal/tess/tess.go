// Package tess is a thin wrapper over libtesseract's C API, loaded with
// dlopen when first needed rather than linked: a machine without the
// library still runs poligon (only OCR answers "not installed"), and
// OMP_THREAD_LIMIT=1 is in the environment before libgomp reads it, which
// happens once, when the library loads (set later, it is ignored and
// tesseract runs 4-12x slower on 2 cores: vision.md §1.2).
package tess

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnavailable wraps every reason OCR cannot run here: no cgo in this
// build, no library, no language data.
var ErrUnavailable = errors.New("OCR is unavailable")

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
