package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/dataset/datasettest"
)

// TestDatasetExport: poligon dataset export on a small synthetic capture,
// its summary, its refusals (error + hint, nothing written) and its usage
// errors.
func TestDatasetExport(t *testing.T) {
	e := env(t, t.TempDir())
	root := t.TempDir()
	capture, eval, out := filepath.Join(root, "capture"), filepath.Join(root, "holo2-eval"), filepath.Join(root, "holo2-train")
	if _, err := datasettest.Capture(capture, datasettest.Spec{Sessions: 3, ShotsPerSession: 3, W: 320, H: 200}); err != nil {
		t.Fatal(err)
	}
	// One click without an intent, one benchmark frame (seed 4: the second session's second shot).
	w, err := dataset.NewWriter(capture, 0)
	if err != nil {
		t.Fatal(err)
	}
	scr := datasettest.Draw(99, 320, 200)
	if _, err := w.Write(dataset.Shot{Session: "s9", Agent: "user", PNG: datasettest.PNG(scr.Image), OCR: scr.Words,
		Line: dataset.Line{Click: &[2]int{10, 10}, Origin: "ui_click"}}); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(eval, 0o755)
	os.WriteFile(filepath.Join(eval, "seen.png"), datasettest.PNG(datasettest.Draw(4, 320, 200).Image), 0o644)

	stdout, stderr, code := poligon(t, e, "dataset", "export", "--dataset", capture, "--out", out, "--eval", eval, "--tar", filepath.Join(root, "t.tar.gz"))
	if code != 0 || !strings.Contains(stdout, "exported 8 of 10 index lines to "+out) || !strings.Contains(stdout, "skipped no_intent: 1") ||
		!strings.Contains(stdout, "skipped eval_frame: 1") || !strings.Contains(stdout, "report: "+out+"/report.json") {
		t.Fatalf("export = exit %d:\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "t.tar.gz")); err != nil {
		t.Fatal(err)
	}

	// A dry run prints the report; comma lists and repeated flags are one list.
	stdout, stderr, code = poligon(t, e, "dataset", "export", "--dataset", capture, "--out", filepath.Join(root, "dry"), "--no-eval",
		"--dry-run", "--locale", "ru_RU.UTF-8,en", "--locale", "de", "--clicks-only")
	var rep dataset.Report
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || !slices.Equal(rep.Filters.Locale, []string{"ru", "en", "de"}) ||
		rep.EvalCheck != "none" || !rep.Filters.ClicksOnly || rep.Skipped[dataset.SkipNotClick] == 0 {
		t.Fatalf("dry run = exit %d:\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "dry")); !os.IsNotExist(err) {
		t.Fatalf("a dry run wrote: %v", err)
	}

	// Refusals: error and hint, exit 1.
	for _, args := range [][]string{
		{"--dataset", capture, "--out", capture, "--eval", eval, "--force"}, // onto the capture
		{"--dataset", capture, "--out", out, "--eval", eval},                // a previous export without --force
		{"--dataset", capture, "--out", filepath.Join(root, "x")},           // no holo2-eval here
		{"--dataset", filepath.Join(root, "nope"), "--out", filepath.Join(root, "x"), "--no-eval"},
	} {
		_, stderr, code := poligon(t, e, append([]string{"dataset", "export"}, args...)...)
		if code != 1 || !strings.HasPrefix(stderr, "error: ") || !strings.Contains(stderr, "\nhint: ") {
			t.Errorf("poligon dataset export %s = exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "x")); !os.IsNotExist(err) {
		t.Fatalf("a refused export wrote: %v", err)
	}
	// Usage errors: exit 2.
	for _, args := range [][]string{{"dataset"}, {"dataset", "import"}, {"dataset", "export", "extra"}, {"dataset", "export", "--seed", "x"}} {
		if _, stderr, code := poligon(t, e, args...); code != 2 {
			t.Errorf("poligon %s = exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
}
