package ocr

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Available, which readiness reports and the startup line ask, answers from
// the files alone: it neither loads libtesseract nor starts an engine. The
// first read loads it. Run in a process of its own, which no other test has
// loaded the library into.
func TestAvailableLoadsNothing(t *testing.T) {
	if os.Getenv("POLIGON_OCR_LAZY_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAvailableLoadsNothing$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "POLIGON_OCR_LAZY_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if strings.Contains(string(out), "--- SKIP") {
			t.Skipf("the child skipped:\n%s", out)
		}
		return
	}
	r := New(Config{})
	defer r.Close()
	if err := r.Available(); err != nil {
		if strings.Contains(err.Error(), "without cgo") {
			t.Skip(err)
		}
		t.Fatalf("OCR must work for these tests (tools/deps.sh installs it): %v", err)
	}
	if libraryMapped(t) {
		t.Fatal("Available loaded libtesseract")
	}
	p, err := r.Read(context.Background(), loadPNG(t, "testdata/screens.png"))
	if err != nil || len(p.Lines) == 0 {
		t.Fatalf("the first read: %d lines, %v", len(p.Lines), err)
	}
	if !libraryMapped(t) {
		t.Error("libtesseract is not in the process after a read")
	}
	if err := r.Available(); err != nil {
		t.Errorf("Available after the engines started = %v", err)
	}
}

func libraryMapped(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "libtesseract")
}
