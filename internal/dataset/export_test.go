package dataset_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/image/draw"

	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/dataset/datasettest"
)

// fixture is a synthetic capture with every case the exporter's rules are
// about, a benchmark, and a directory outside both holding a "secret".
type fixture struct {
	root, capture, eval, outside string
	sessions                     []string // S0..S5
	lines                        int      // index lines in all
}

const fw, fh = 640, 400

// newFixture copies the template capture and benchmark (see
// buildTemplate) into a test's own directory, then adds what names that
// directory: the outside files, symlinks to them, and hostile index lines.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	templateOnce.Do(func() { template, templateErr = buildTemplate() })
	if templateErr != nil {
		t.Fatal(templateErr)
	}
	root := t.TempDir()
	if out, err := exec.Command("cp", "-a", template.capture, template.eval, root).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	f := &fixture{root: root, capture: filepath.Join(root, "capture"), eval: filepath.Join(root, "holo2-eval"),
		outside: filepath.Join(root, "outside"), sessions: template.sessions}
	S := f.sessions
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Symlinks out of the capture.
	must(os.MkdirAll(f.outside, 0o755))
	must(os.WriteFile(filepath.Join(f.outside, "secret.png"), datasettest.PNG(datasettest.Draw(0, fw, fh).Image), 0o644))
	must(os.Symlink(filepath.Join(f.outside, "secret.png"), filepath.Join(f.capture, S[0], "user-shot-0100.png")))
	must(os.Symlink(f.outside, filepath.Join(f.capture, "evil")))

	// Index edits, then hostile lines.
	index := filepath.Join(f.capture, dataset.IndexName)
	lines := strings.Split(strings.TrimSpace(string(mustRead(t, index))), "\n")
	edit := func(i int, change func(m map[string]any)) string {
		var m map[string]any
		must(json.Unmarshal([]byte(lines[i]), &m))
		change(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	lines[13] = edit(13, func(m map[string]any) { m["guest_w"], m["guest_h"] = 1920, 1080 }) // size_mismatch
	lines[16] = edit(16, func(m map[string]any) { m["screen_changed"] = true })              // screen_changed
	lines = append(lines,
		`not json`,       // bad_line
		`{"atspi":null}`, // bad_line: no shot
		`{"shot":"`+filepath.Join(f.outside, "secret.png")+`"}`,                                // path_refused: absolute
		`{"shot":"`+S[0]+`/../../outside/secret.png"}`,                                         // path_refused: ..
		`{"shot":"`+S[0]+`/user-shot-0100.png"}`,                                               // path_refused: a symlinked file
		`{"shot":"evil/secret.png"}`,                                                           // path_refused: a symlinked directory
		edit(18, func(m map[string]any) { m["atspi"] = S[3] + "/../../outside/x.atspi.json" }), // path_refused
		edit(19, func(m map[string]any) { m["ocr"] = "index.jsonl" }),                          // path_refused: not an OCR file
		edit(0, func(m map[string]any) { m["session"] = "../x" }),                              // path_refused: session
		lines[0], // duplicate
		edit(3, func(m map[string]any) { m["intent"] = nil }), // no_intent
	)
	must(os.WriteFile(index, []byte(strings.Join(lines, "\n")+"\n"), 0o640))
	f.lines = len(lines)
	return f
}

var (
	templateOnce sync.Once
	template     *fixture
	templateErr  error
)

// buildTemplate writes, once per test binary, the capture and benchmark
// the export tests copy:
//
//	S0..S5: 5 shots each, seeds 5s..5s+4 (even seeds are hard screens, i=0 and 3 are clicks);
//	S0, S2, S4 ru, the others en; S2 and S3 dark, the others light.
//	S4 and S5 are named by the benchmark; seeds 1, 7 and 12 are benchmark frames
//	(full size PNG, half size PNG, half size JPEG).
//	Damaged files as commented; two Wayland shots appended to S0.
func buildTemplate() (_ *fixture, err error) {
	// The steps below cannot fail but on a disk error: the first one ends the build.
	must := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	root, err := os.MkdirTemp("", "dataset-template-")
	if err != nil {
		return nil, err
	}
	f := &fixture{root: root, capture: filepath.Join(root, "capture"), eval: filepath.Join(root, "holo2-eval")}
	written, err := datasettest.Capture(f.capture, datasettest.Spec{Sessions: 6, ShotsPerSession: 5, W: fw, H: fh})
	if err != nil {
		return nil, err
	}
	for _, l := range written.Lines {
		if !slices.Contains(f.sessions, l.Session) {
			f.sessions = append(f.sessions, l.Session)
		}
	}
	S := f.sessions
	path := func(seed int, suffix string) string {
		return filepath.Join(f.capture, strings.TrimSuffix(written.Lines[seed].Shot, dataset.PNGSuffix)+suffix)
	}
	read := func(p string) []byte {
		b, e := os.ReadFile(p)
		must(e)
		return b
	}

	// The benchmark.
	must(os.MkdirAll(filepath.Join(f.eval, S[5]), 0o755))
	must(os.MkdirAll(filepath.Join(f.eval, "frames"), 0o755))
	must(os.WriteFile(filepath.Join(f.eval, S[5], "user-shot-0001.png"), datasettest.PNG(datasettest.Draw(500, fw, fh).Image), 0o644))
	must(os.WriteFile(filepath.Join(f.eval, "index.jsonl"), []byte(`{"shot":"`+S[4]+`/user-shot-0009.png","intent":"x"}`+"\n"), 0o644))
	half := func(seed int64) image.Image {
		dst := image.NewRGBA(image.Rect(0, 0, fw/2, fh/2))
		draw.ApproxBiLinear.Scale(dst, dst.Bounds(), datasettest.Draw(seed, fw, fh).Image, image.Rect(0, 0, fw, fh), draw.Src, nil)
		return dst
	}
	must(os.WriteFile(filepath.Join(f.eval, "frames", "full.png"), read(path(1, dataset.PNGSuffix)), 0o644))
	must(os.WriteFile(filepath.Join(f.eval, "frames", "half.png"), datasettest.PNG(half(7)), 0o644))
	var jb bytes.Buffer
	must(jpeg.Encode(&jb, half(12), &jpeg.Options{Quality: 85}))
	must(os.WriteFile(filepath.Join(f.eval, "frames", "half.jpg"), jb.Bytes(), 0o644))

	// Damaged files.
	must(os.Remove(path(2, dataset.ATSPISuffix)))                                                          // atspi_missing
	must(os.WriteFile(path(4, dataset.ATSPISuffix), []byte("not json"), 0o640))                            // atspi_unreadable
	must(os.WriteFile(path(6, dataset.ATSPISuffix), []byte(`{"error":"no session","widgets":[]}`), 0o640)) // atspi_error_only
	must(os.WriteFile(path(8, dataset.ATSPISuffix), []byte(`{"screen":[640,400],"widgets":[]}`), 0o640))   // atspi_empty
	must(os.WriteFile(path(9, dataset.OCRSuffix), []byte("garbage without tabs\n"), 0o640))                // ocr_unreadable
	must(os.Remove(path(10, dataset.PNGSuffix)))                                                           // shot_missing
	must(os.WriteFile(path(11, dataset.PNGSuffix), read(path(11, dataset.PNGSuffix))[:200], 0o640))        // shot_unreadable
	must(os.Remove(path(14, dataset.ATSPISuffix)))                                                         // no_ground_truth ...
	must(os.Remove(path(14, dataset.OCRSuffix)))                                                           // ... (atspi_missing with --require-atspi)
	must(os.Remove(path(17, dataset.OCRSuffix)))                                                           // ocr_missing

	// Two Wayland shots in S0: one whose logical dump the exporter places
	// on the frame (a root widget at the origin), one it cannot.
	w, werr := dataset.NewWriter(f.capture, 0)
	if werr != nil {
		return nil, werr
	}
	for i, widgets := range [][]dataset.Widget{
		{{Role: "frame", Name: "gnome-shell", X: 0, Y: 0, W: fw / 2, H: fh / 2, States: []string{"showing"}, Depth: 1},
			{Role: "push button", Name: "OK", X: 100, Y: 50, W: 20, H: 10, States: []string{"showing"}, Depth: 3}},
		{{Role: "push button", Name: "OK", X: 100, Y: 50, W: 20, H: 10, States: []string{"showing"}, Depth: 3}},
	} {
		scr := datasettest.Draw(int64(200+i), fw, fh)
		dump, _ := json.Marshal(dataset.Dump{SessionType: "wayland", Locale: "ru_RU.UTF-8", Widgets: widgets})
		_, e := w.Write(dataset.Shot{Session: S[0], Agent: "user", PNG: datasettest.PNG(scr.Image), ATSPI: dump, OCR: scr.Words,
			Line: dataset.Line{App: "poligon-form", Theme: "light", Origin: "ui_screenshot"}})
		must(e)
	}
	return f, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if template != nil {
		os.RemoveAll(template.root)
	}
	os.Exit(code)
}

func (f *fixture) options(out string) dataset.Options {
	return dataset.Options{Dataset: f.capture, Out: filepath.Join(f.root, out), Eval: f.eval, Seed: 1, ValFraction: 0.25}
}

// treeDigest sums every path and content under dir (symlinks as their targets' names).
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", p, d.Type())
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			h.Write([]byte(target))
		case d.Type().IsRegular():
			h.Write(mustRead(t, p))
		}
		return nil
	})
	return fmt.Sprintf("%x", h.Sum(nil))
}

// exportLines reads an export's train and val index lines.
func exportLines(t *testing.T, out string) (train, val []dataset.Line) {
	t.Helper()
	for name, into := range map[string]*[]dataset.Line{dataset.TrainIndex: &train, dataset.ValIndex: &val} {
		err := dataset.ReadIndex(filepath.Join(out, name), func(e dataset.IndexEntry) error {
			if e.Err != nil {
				return e.Err
			}
			*into = append(*into, e.Line)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return train, val
}

// files lists the regular files under dir, relative; a symlink fails the test.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			t.Fatalf("a symlink in the export: %s", p)
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(out)
	return out
}

func valSessions(val []dataset.Line) []string {
	var s []string
	for _, l := range val {
		if !slices.Contains(s, l.Session) {
			s = append(s, l.Session)
		}
	}
	slices.Sort(s)
	return s
}

func TestExportRules(t *testing.T) {
	f := newFixture(t)
	before := treeDigest(t, f.capture)
	outsideBefore := treeDigest(t, f.outside)
	o := f.options("holo2-train")
	rep, err := dataset.Export(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	wantSkipped := map[string]int{
		dataset.SkipEvalSession: 10, dataset.SkipEvalFrame: 3, dataset.SkipShotMissing: 1, dataset.SkipShotBad: 1,
		dataset.SkipScreenChanged: 1, dataset.SkipNoTruth: 1, dataset.SkipBadLine: 2, dataset.SkipPathRefused: 7,
		dataset.SkipDuplicate: 1, dataset.SkipNoIntent: 1,
	}
	if !maps.Equal(rep.Skipped, wantSkipped) {
		t.Errorf("skipped\n got %v\nwant %v", rep.Skipped, wantSkipped)
	}
	wantDropped := map[string]int{dataset.ATSPIMissing: 1, dataset.ATSPIUnreadable: 1, dataset.ATSPIErrorOnly: 1,
		dataset.ATSPIEmpty: 1, dataset.ATSPISizes: 1, dataset.ATSPIUnplaceable: 1}
	if !maps.Equal(rep.ATSPIDropped, wantDropped) {
		t.Errorf("atspi dropped\n got %v\nwant %v", rep.ATSPIDropped, wantDropped)
	}
	if want := map[string]int{dataset.OCRUnreadable: 1, dataset.OCRMissing: 1}; !maps.Equal(rep.OCRDropped, want) {
		t.Errorf("ocr dropped %v", rep.OCRDropped)
	}
	if rep.Lines != f.lines || rep.Exported != 15 || rep.WithATSPI != 9 || rep.WithOCR != 13 || rep.PlacedLogical != 1 ||
		rep.Clicks != 7 || rep.ClicksIntent != 7 || rep.EvalCheck != "pixels" || rep.EvalFrames != 4 || rep.DryRun {
		t.Errorf("report: lines %d exported %d with_atspi %d with_ocr %d placed %d clicks %d/%d eval %s/%d",
			rep.Lines, rep.Exported, rep.WithATSPI, rep.WithOCR, rep.PlacedLogical, rep.Clicks, rep.ClicksIntent, rep.EvalCheck, rep.EvalFrames)
	}
	if rep.Train.Sessions != 3 || rep.Val.Sessions != 1 || rep.Train.Frames+rep.Val.Frames != 15 {
		t.Errorf("split %+v %+v", rep.Train, rep.Val)
	}
	if rep.ByLocale["ru"] != 7 || rep.ByLocale["en"] != 8 || rep.HardScreenBase != 9 || rep.HardScreenTarget != 0.3 {
		t.Errorf("by locale %v, hard %+v", rep.ByLocale, rep.Hard)
	}
	for _, d := range rep.SkipDetails {
		if d.Code == "" || d.Detail == "" || d.Line == 0 {
			t.Errorf("skip detail %+v", d)
		}
	}

	// report.json on disk is the report answered.
	var onDisk dataset.Report
	if err := json.Unmarshal(mustRead(t, filepath.Join(o.Out, dataset.ReportName)), &onDisk); err != nil || !maps.Equal(onDisk.Skipped, rep.Skipped) {
		t.Fatalf("report.json: %v %v", onDisk.Skipped, err)
	}

	// The export holds the lines' PNG, dump and OCR files and nothing else.
	train, val := exportLines(t, o.Out)
	want := []string{dataset.ReportName, dataset.TrainIndex, dataset.ValIndex}
	splitOf := map[string]string{}
	evalPrints := evalFingerprints(t, f.eval)
	for half, lines := range map[string][]dataset.Line{"train": train, "val": val} {
		for _, l := range lines {
			if prev, ok := splitOf[l.Session]; ok && prev != half {
				t.Errorf("session %s in both halves", l.Session)
			}
			splitOf[l.Session] = half
			for _, p := range []string{l.Shot, l.ATSPI, l.OCR} {
				if p != "" {
					want = append(want, p)
				}
			}
			if l.Locale != "ru" && l.Locale != "en" || l.IsClick() && l.Intent == "" || l.ScreenChanged != nil && *l.ScreenChanged {
				t.Errorf("exported line %+v", l)
			}
			img, err := png.Decode(bytes.NewReader(mustRead(t, filepath.Join(o.Out, l.Shot))))
			if err != nil {
				t.Fatal(err)
			}
			fp := dataset.FingerprintOf(img)
			for _, e := range evalPrints {
				if fp.Matches(e) {
					t.Errorf("%s shows a benchmark screen", l.Shot)
				}
			}
		}
	}
	slices.Sort(want)
	if got := files(t, o.Out); !slices.Equal(got, want) {
		t.Errorf("export files\n got %v\nwant %v", got, want)
	}

	// The Wayland dump was placed on its frame: 320x200 logical onto 640x400.
	placed := false
	for _, l := range append(train, val...) {
		if l.CoordSpace != "logical" || l.ATSPI == "" {
			continue
		}
		placed = true
		d, err := dataset.ParseDump(mustRead(t, filepath.Join(o.Out, l.ATSPI)))
		if err != nil {
			t.Fatal(err)
		}
		ok := d.Widgets[1]
		if l.Rescaled == nil || l.Rescaled.From != [2]int{320, 200} || l.Rescaled.To != [2]int{640, 400} || ok.X != 200 || ok.Y != 100 || ok.W != 40 || ok.H != 20 {
			t.Errorf("placed dump: %+v %+v", l.Rescaled, ok)
		}
	}
	if !placed {
		t.Error("no placed Wayland dump exported")
	}

	// Nothing outside --out changed.
	if treeDigest(t, f.capture) != before || treeDigest(t, f.outside) != outsideBefore {
		t.Error("the export changed the capture or the directory outside it")
	}
	if leftovers := siblings(t, f.root); !slices.Equal(leftovers, []string{"capture", "holo2-eval", "holo2-train", "outside"}) {
		t.Errorf("beside the export: %v", leftovers)
	}
}

func siblings(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func evalFingerprints(t *testing.T, dir string) []*dataset.Fingerprint {
	t.Helper()
	var out []*dataset.Fingerprint
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if ext := filepath.Ext(p); ext == ".png" || ext == ".jpg" {
			img, _, err := image.Decode(bytes.NewReader(mustRead(t, p)))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, dataset.FingerprintOf(img))
		}
		return nil
	})
	return out
}

func TestExportRequireATSPI(t *testing.T) {
	f := newFixture(t)
	o := f.options("train")
	o.RequireATSPI, o.DryRun = true, true
	rep, err := dataset.Export(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for code, n := range map[string]int{dataset.ATSPIMissing: 2, dataset.ATSPIUnreadable: 1, dataset.ATSPIErrorOnly: 1,
		dataset.ATSPIEmpty: 1, dataset.ATSPISizes: 1, dataset.ATSPIUnplaceable: 1, dataset.SkipNoTruth: 0} {
		if rep.Skipped[code] != n {
			t.Errorf("skipped[%s] = %d, want %d", code, rep.Skipped[code], n)
		}
	}
	if rep.Exported != 9 || rep.WithATSPI != 9 || len(rep.ATSPIDropped) != 0 {
		t.Errorf("exported %d with_atspi %d dropped %v", rep.Exported, rep.WithATSPI, rep.ATSPIDropped)
	}
	// A dry run writes nothing.
	if _, err := os.Stat(o.Out); !os.IsNotExist(err) {
		t.Errorf("a dry run wrote %s: %v", o.Out, err)
	}
	if leftovers := siblings(t, f.root); len(leftovers) != 3 {
		t.Errorf("a dry run left %v", leftovers)
	}
}

func TestExportFilters(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name   string
		set    func(*dataset.Options)
		code   string
		check  func(dataset.Line) bool
		export int
	}{
		{"locale", func(o *dataset.Options) { o.Locale = []string{"ru_RU.UTF-8"} }, dataset.SkipLocale, func(l dataset.Line) bool { return l.Locale == "ru" }, 7},
		{"theme", func(o *dataset.Options) { o.Theme = []string{"DARK"} }, dataset.SkipTheme, func(l dataset.Line) bool { return l.Theme == "dark" }, 5},
		{"app", func(o *dataset.Options) { o.App = []string{"workbench"} }, dataset.SkipApp, func(l dataset.Line) bool { return l.App == "workbench" }, 5},
		{"clicks", func(o *dataset.Options) { o.ClicksOnly = true }, dataset.SkipNotClick, func(l dataset.Line) bool { return l.IsClick() }, 7},
	} {
		o := f.options("out-" + c.name)
		c.set(&o)
		rep, err := dataset.Export(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		train, val := exportLines(t, o.Out)
		if rep.Skipped[c.code] == 0 || rep.Exported != c.export || len(train)+len(val) != c.export {
			t.Errorf("%s: skipped %v, exported %d (want %d)", c.name, rep.Skipped, rep.Exported, c.export)
		}
		for _, l := range append(train, val...) {
			if !c.check(l) {
				t.Errorf("%s: exported %+v", c.name, l)
			}
		}
	}
	// Without the benchmark check, the benchmark's shots go out too, and the report says so.
	o := f.options("no-eval")
	o.Eval, o.NoEval, o.DryRun = "", true, true
	rep, err := dataset.Export(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.EvalCheck != "none" || rep.Skipped[dataset.SkipEvalFrame] != 0 || rep.Skipped[dataset.SkipEvalSession] != 0 || rep.Exported != 15+13 || len(rep.Warnings) == 0 {
		t.Errorf("--no-eval: check %s exported %d skipped %v warnings %v", rep.EvalCheck, rep.Exported, rep.Skipped, rep.Warnings)
	}
}

// A second run with another seed splits differently; the same seed again
// splits the same. Each run replaces the previous export whole (--force),
// the tar too.
func TestExportSeedsAndForce(t *testing.T) {
	f := newFixture(t)
	o := f.options("holo2-train")
	o.Tar = filepath.Join(f.root, "holo2-train.tar.gz")
	runWith := func(seed int64, clicksOnly bool) []string {
		t.Helper()
		o.Seed, o.ClicksOnly = seed, clicksOnly
		if _, err := dataset.Export(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		_, val := exportLines(t, o.Out)
		if got, want := tarFiles(t, o.Tar), files(t, o.Out); !slices.Equal(got, want) {
			t.Fatalf("tar\n got %v\nwant %v", got, want)
		}
		return valSessions(val)
	}
	first := runWith(1, false)
	if _, err := dataset.Export(context.Background(), o); err == nil {
		t.Fatal("an existing export was replaced without --force")
	}
	o.Force = true
	second := runWith(2, false)
	again := runWith(1, false)
	if len(first) != 1 || slices.Equal(first, second) || !slices.Equal(first, again) {
		t.Fatalf("validation sessions: seed 1 %v, seed 3 %v, seed 1 again %v", first, second, again)
	}
	// A stricter run leaves none of the previous run's frames, in the directory or the tar.
	runWith(1, true)
	train, val := exportLines(t, o.Out)
	for _, l := range append(train, val...) {
		if !l.IsClick() {
			t.Fatalf("a non-click exported: %s", l.Shot)
		}
	}
	if n := len(files(t, o.Out)); n > 3+3*7 {
		t.Fatalf("%d files after a clicks-only run: the previous run's frames stayed", n)
	}
	if leftovers := siblings(t, f.root); !slices.Equal(leftovers, []string{"capture", "holo2-eval", "holo2-train", "holo2-train.tar.gz", "outside"}) {
		t.Errorf("beside the export: %v", leftovers)
	}
}

func tarFiles(t *testing.T, path string) []string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	gz, err := gzip.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(h.Name, "/") || slices.Contains(strings.Split(h.Name, "/"), "..") {
			t.Fatalf("tar entry %q", h.Name)
		}
		if h.Typeflag == tar.TypeReg {
			names = append(names, h.Name)
		} else if h.Typeflag != tar.TypeDir {
			t.Fatalf("tar entry %q of type %c", h.Name, h.Typeflag)
		}
	}
	slices.Sort(names)
	return names
}

// Refusals change nothing and say what to do instead.
func TestExportRefusals(t *testing.T) {
	f := newFixture(t)
	prev := f.options("holo2-train")
	if _, err := dataset.Export(context.Background(), prev); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(f.outside, "notes.txt"), []byte("mine"), 0o644)
	os.Symlink(f.capture, filepath.Join(f.root, "alias")) // the capture under another name
	digest := func() string { return treeDigest(t, f.root) }
	before := digest()
	for name, c := range map[string]struct {
		change func(*dataset.Options)
		says   string
	}{
		"the capture":         {func(o *dataset.Options) { o.Out, o.Force = f.capture, true }, "swapping the export in would delete the source"},
		"inside the capture":  {func(o *dataset.Options) { o.Out, o.Force = filepath.Join(f.capture, f.sessions[0]), true }, "delete the source"},
		"a new dir inside it": {func(o *dataset.Options) { o.Out = filepath.Join(f.capture, "train") }, "delete the source"},
		"above the capture":   {func(o *dataset.Options) { o.Out, o.Force = f.root, true }, "delete the source"},
		"the benchmark":       {func(o *dataset.Options) { o.Out, o.Force = f.eval, true }, "delete the source"},
		"through a symlink":   {func(o *dataset.Options) { o.Out, o.Force = filepath.Join(f.root, "alias"), true }, "delete the source"},
		"an export, no force": {func(o *dataset.Options) {}, "exists"},
		"not an export":       {func(o *dataset.Options) { o.Out, o.Force = f.outside, true }, "not a previous export"},
		"tar in the capture": {func(o *dataset.Options) {
			o.Out, o.Tar = filepath.Join(f.root, "t2"), filepath.Join(f.capture, "x.tar")
		}, "--tar"},
		"no benchmark dir":     {func(o *dataset.Options) { o.Out, o.Eval = filepath.Join(f.root, "t3"), filepath.Join(f.root, "nope") }, "benchmark directory"},
		"no benchmark at all":  {func(o *dataset.Options) { o.Out, o.Eval = filepath.Join(f.root, "t4"), "" }, "no benchmark"},
		"eval and no-eval":     {func(o *dataset.Options) { o.Out, o.NoEval = filepath.Join(f.root, "t5"), true }, "together"},
		"val fraction 1":       {func(o *dataset.Options) { o.Out, o.ValFraction = filepath.Join(f.root, "t6"), 1 }, "--val-fraction"},
		"not a capture":        {func(o *dataset.Options) { o.Out, o.Dataset = filepath.Join(f.root, "t7"), f.outside }, "not a capture directory"},
		"no capture directory": {func(o *dataset.Options) { o.Out, o.Dataset = filepath.Join(f.root, "t8"), "" }, "no capture directory"},
	} {
		o := f.options("holo2-train")
		c.change(&o)
		_, err := dataset.Export(context.Background(), o)
		var de *dataset.Error
		if !errors.As(err, &de) || de.Hint() == "" || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v (want an error with a hint saying %q)", name, err, c.says)
		}
		if digest() != before {
			t.Fatalf("%s: a refused export changed files", name)
		}
	}
}

// An export that fails halfway (here: interrupted once half the lines are
// checked) leaves the previous export as it was, and no half-built one.
func TestExportInterruptedKeepsPrevious(t *testing.T) {
	f := newFixture(t)
	o := f.options("holo2-train")
	o.Tar = filepath.Join(f.root, "train.tar")
	if _, err := dataset.Export(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	before := treeDigest(t, f.root)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.Force, o.Seed, o.Workers = true, 9, 1
	halfway := 0
	o.Progress = func(done, total int) {
		if done == total/2 {
			halfway = done
			cancel()
		}
	}
	_, err := dataset.Export(ctx, o)
	if !errors.Is(err, context.Canceled) || halfway == 0 {
		t.Fatalf("interrupted export: %v (halfway at %d)", err, halfway)
	}
	if treeDigest(t, f.root) != before {
		t.Fatal("an interrupted export changed the previous one or left files behind")
	}
}

// The same on a real full disk: the export's volume fills halfway through
// the new export; the previous one is intact and nothing is left behind.
func TestExportDiskFullKeepsPrevious(t *testing.T) {
	f := newFixture(t)
	// Sizes on disk of a clicks-only and a full export.
	size := func(o dataset.Options) int64 {
		if _, err := dataset.Export(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("du", "-s", "--block-size=1024", o.Out).Output()
		if err != nil {
			t.Fatal(err)
		}
		var kb int64
		fmt.Sscan(string(out), &kb)
		return kb
	}
	small := f.options("small")
	small.ClicksOnly = true
	smallKB, fullKB := size(small), size(f.options("full"))
	vol := filepath.Join(f.root, "vol")
	os.Mkdir(vol, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk", smallKB+fullKB/2+8), "tmpfs", vol).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(vol, syscall.MNT_DETACH) })
	o := f.options("vol/holo2-train")
	o.ClicksOnly = true
	if _, err := dataset.Export(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	before := treeDigest(t, vol)
	o.ClicksOnly, o.Force = false, true
	_, err := dataset.Export(context.Background(), o)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the full export on a %d KB volume: %v", smallKB+fullKB/2, err)
	}
	if treeDigest(t, vol) != before {
		t.Fatal("a failed export changed the previous one or left files behind")
	}
}
