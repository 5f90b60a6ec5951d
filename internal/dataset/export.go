package dataset

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // benchmark frames may be JPEGs
	"image/png"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options are an export's flags (`poligon dataset export`).
type Options struct {
	Dataset string // the capture directory
	Out     string // the export directory, written whole and swapped in
	Tar     string // also pack the export into this tar (.tar.gz/.tgz: gzipped)

	RequireATSPI bool     // skip shots without a usable dump, instead of keeping them on their OCR
	ClicksOnly   bool     // keep clicks and drags only
	Locale       []string // keep these languages only (ru_RU.UTF-8 and ru are both ru)
	Theme        []string // keep these themes only
	App          []string // keep these applications only

	Seed        int64   // the session split's seed
	ValFraction float64 // the share of sessions that go to validation, 0 <= f < 1

	Eval   string // the benchmark (holo2-eval): its sessions and screens stay out
	NoEval bool   // export without the benchmark check (report.json says so)

	Force  bool // replace a previous export (never the capture, the benchmark or what holds them)
	DryRun bool // the report alone: nothing is written

	Workers  int                   // files checked at once; 0: one per CPU
	Progress func(done, total int) // called as lines are checked, one call at a time
}

// The export's own files beside the frames.
const (
	ReportName = "report.json"
	TrainIndex = "train.jsonl"
	ValIndex   = "val.jsonl"
)

// row is one index line on its way through the export.
type row struct {
	n       int
	line    Line
	session string
	shot    string // the source files, resolved inside the capture ("": none)
	atspi   string
	ocr     string

	skip, detail string // set when the line is left out
	atspiDrop    string // why the dump does not go out with the shot
	ocrDrop      string
	placed       *Rescale // a logical dump this export scaled onto the frame
	hard         *bool
}

// Export turns a capture into a training set: Options.Out gets the shots
// that pass every rule (their PNG, dump and OCR files under the same
// relative paths), train.jsonl and val.jsonl (their index lines, split by
// session) and report.json, which it also answers. The export is built in
// a temporary directory beside Out and swapped in whole: a failure or an
// interruption (ctx) leaves a previous export as it was.
func Export(ctx context.Context, o Options) (*Report, error) {
	began := time.Now()
	p, err := resolve(o)
	if err != nil {
		return nil, err
	}
	workers := cmp.Or(o.Workers, runtime.GOMAXPROCS(0))
	rep := &Report{
		Format: reportFormat, Dataset: p.dataset, Out: p.out, Tar: p.tar, Eval: p.eval, EvalCheck: "none",
		Seed: o.Seed, ValFraction: o.ValFraction, DryRun: o.DryRun, Warnings: []string{},
		Filters:      Filters{RequireATSPI: o.RequireATSPI, ClicksOnly: o.ClicksOnly, Locale: normalized(o.Locale), Theme: o.Theme, App: o.App},
		Skipped:      map[string]int{},
		SkipDetails:  []SkipDetail{},
		ATSPIDropped: map[string]int{}, OCRDropped: map[string]int{},
		ByLocale: map[string]int{}, ByTheme: map[string]int{}, ByApp: map[string]int{}, ByOrigin: map[string]int{},
		Train: Split{Index: TrainIndex}, Val: Split{Index: ValIndex},
	}
	rep.HardScreenTarget = HardScreenTarget

	var bench *evalSet
	if o.NoEval {
		rep.Warnings = append(rep.Warnings, "exported without the benchmark check (--no-eval): do not measure a model trained on it with a benchmark made from the same machines")
	} else {
		if bench, err = loadEval(ctx, p.eval, workers); err != nil {
			return nil, err
		}
		rep.EvalCheck, rep.EvalFrames, rep.EvalBad = "pixels", len(bench.prints), bench.unreadable
		if len(bench.prints) == 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("the benchmark directory %s holds no images: is it the right one?", p.eval))
		}
		if bench.unreadable > 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d benchmark images do not decode: matched by their bytes only", bench.unreadable))
		}
	}

	rows, err := readRows(p, o, bench)
	if err != nil {
		return nil, err
	}
	rep.Lines = len(rows)

	tmp := ""
	if !o.DryRun {
		if err := os.MkdirAll(filepath.Dir(p.out), 0o755); err != nil {
			return nil, err
		}
		if tmp, err = os.MkdirTemp(filepath.Dir(p.out), "."+filepath.Base(p.out)+".export-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp) // gone once swapped in; the half-built export otherwise
		// Modes as the capture's: the frames show people's screens.
		if err := os.Chmod(tmp, 0o750); err != nil {
			return nil, err
		}
	}
	if err := checkRows(ctx, rows, p, o, bench, tmp, workers); err != nil {
		return nil, err
	}
	train, val := tally(rows, o, rep)
	rep.TookMS = time.Since(began).Milliseconds()
	if o.DryRun {
		return rep, nil
	}

	for _, f := range []struct {
		name  string
		lines []Line
	}{{TrainIndex, train}, {ValIndex, val}} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		for _, l := range f.lines {
			if err := enc.Encode(l); err != nil {
				return nil, err
			}
		}
		if err := writeSynced(filepath.Join(tmp, f.name), b.Bytes()); err != nil {
			return nil, err
		}
	}
	rb, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeSynced(filepath.Join(tmp, ReportName), append(rb, '\n')); err != nil {
		return nil, err
	}
	if err := syncTree(tmp); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tarTmp := ""
	if p.tar != "" {
		if tarTmp, err = writeTar(tmp, p.tar); err != nil {
			return nil, err
		}
		defer os.Remove(tarTmp)
	}
	if err := swapIn(tmp, p.out); err != nil {
		return nil, err
	}
	if tarTmp != "" {
		if err := os.Rename(tarTmp, p.tar); err != nil {
			return nil, err
		}
		if err := syncDir(filepath.Dir(p.tar)); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// paths are an export's directories, absolute with symlinks resolved.
type paths struct {
	dataset, eval, out, tar string
}

// resolve checks the options before anything is read or written.
func resolve(o Options) (*paths, error) {
	switch {
	case o.Dataset == "":
		return nil, failf("pass --dataset DIR: the capture directory (POLIGON_MCP_DATASET)", "no capture directory")
	case o.Out == "":
		return nil, failf("pass --out DIR: where the training set goes (holo2-train)", "no export directory")
	case !(o.ValFraction >= 0 && o.ValFraction < 1):
		return nil, failf("--val-fraction is the share of sessions for validation, from 0 up to (not including) 1", "--val-fraction %v is out of range", o.ValFraction)
	case o.NoEval && o.Eval != "":
		return nil, failf("pass one of them: --eval DIR checks against the benchmark, --no-eval skips the check", "--eval and --no-eval together")
	case !o.NoEval && o.Eval == "":
		return nil, failf("pass --eval DIR (the benchmark, holo2-eval), or --no-eval to export without the check", "no benchmark directory")
	}
	var p paths
	var err error
	if p.dataset, err = realPath(o.Dataset); err != nil {
		return nil, err
	}
	if st, err := os.Stat(p.dataset); err != nil || !st.IsDir() {
		return nil, failf("pass the directory POLIGON_MCP_DATASET pointed at", "capture directory %s not found", o.Dataset)
	}
	if _, err := os.Stat(filepath.Join(p.dataset, IndexName)); err != nil {
		return nil, failf("a capture directory holds index.jsonl and the session directories; pass that one", "%s has no %s: not a capture directory", o.Dataset, IndexName)
	}
	sources := []string{p.dataset}
	if !o.NoEval {
		if p.eval, err = realPath(o.Eval); err != nil {
			return nil, err
		}
		if st, err := os.Stat(p.eval); err != nil || !st.IsDir() {
			return nil, failf("pass --eval DIR where the benchmark is, or --no-eval to export without the check (report.json says so)", "benchmark directory %s not found", o.Eval)
		}
		sources = append(sources, p.eval)
	}
	if p.out, err = realPath(o.Out); err != nil {
		return nil, err
	}
	for _, src := range sources {
		if within(p.out, src) || within(src, p.out) {
			return nil, failf("pick an --out outside the capture and the benchmark (and not a directory holding them); --force does not change this",
				"--out %s is the capture or the benchmark, inside one or above one: swapping the export in would delete the source", o.Out)
		}
	}
	if err := checkOut(p.out, o); err != nil {
		return nil, err
	}
	if o.Tar != "" {
		if p.tar, err = realPath(o.Tar); err != nil {
			return nil, err
		}
		for _, dir := range append(sources, p.out) {
			if within(p.tar, dir) {
				return nil, failf("write the tar outside the capture, the benchmark and --out", "--tar %s is inside %s", o.Tar, dir)
			}
		}
		st, err := os.Stat(p.tar)
		switch {
		case err == nil && !st.Mode().IsRegular():
			return nil, failf("name a file for the tar", "--tar %s is not a file", o.Tar)
		case err == nil && !o.Force:
			return nil, failf("pass --force to replace it, or name another file", "--tar %s exists", o.Tar)
		}
		if st, err := os.Stat(filepath.Dir(p.tar)); err != nil || !st.IsDir() {
			return nil, failf("create the directory first", "--tar %s: its directory does not exist", o.Tar)
		}
	}
	return &p, nil
}

// checkOut refuses an --out that holds anything but a previous export,
// and a previous export without --force.
func checkOut(out string, o Options) error {
	st, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return failf("--out names the directory the export is written to", "--out %s is not a directory", o.Out)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if !o.Force {
		return failf("pass --force to replace a previous export, or pick another directory", "--out %s exists and is not empty", o.Out)
	}
	b, err := os.ReadFile(filepath.Join(out, ReportName))
	var prev struct{ Format string }
	if err != nil || json.Unmarshal(b, &prev) != nil || prev.Format != reportFormat {
		return failf("--force replaces a previous export only; pick a new or empty directory",
			"--out %s is not a previous export (no %s of one)", o.Out, ReportName)
	}
	return nil
}

// readRows reads the index and applies the rules a line alone decides:
// paths, the benchmark's sessions, screen_changed, intent, the filters,
// duplicates.
func readRows(p *paths, o Options, bench *evalSet) ([]*row, error) {
	var rows []*row
	claimed := map[string]int{} // a relative path -> the line that exports it
	locales := normalized(o.Locale)
	err := ReadIndex(filepath.Join(p.dataset, IndexName), func(e IndexEntry) error {
		r := &row{n: e.N, line: e.Line}
		rows = append(rows, r)
		if e.Err != nil {
			r.skip, r.detail = SkipBadLine, e.Err.Error()
			return nil
		}
		l := &r.line
		if l.LocaleRaw == "" {
			l.LocaleRaw = l.Locale
		}
		l.Locale = NormalizeLocale(l.Locale) // captures written before the index normalized it
		r.session = sessionOf(l)
		if err := checkRelative(r.session); err != nil || strings.Contains(r.session, "/") {
			r.skip, r.detail = SkipPathRefused, fmt.Sprintf("session %q is not one directory name", r.session)
			return nil
		}
		if !r.resolve(p.dataset) {
			return nil
		}
		switch {
		case bench != nil && bench.sessions[r.session]:
			r.skip, r.detail = SkipEvalSession, fmt.Sprintf("session %s is in the benchmark", r.session)
		case l.ScreenChanged != nil && *l.ScreenChanged:
			r.skip, r.detail = SkipScreenChanged, "the screen moved between the frame and the dump"
		case l.IsClick() && strings.TrimSpace(l.Intent) == "":
			r.skip, r.detail = SkipNoIntent, "a click or drag with no intent is not a training pair"
		case o.ClicksOnly && !l.IsClick():
			r.skip, r.detail = SkipNotClick, "not a click or a drag (--clicks-only)"
		case len(locales) > 0 && !slices.Contains(locales, l.Locale):
			r.skip, r.detail = SkipLocale, fmt.Sprintf("locale %q", l.Locale)
		case len(o.Theme) > 0 && !containsFold(o.Theme, l.Theme):
			r.skip, r.detail = SkipTheme, fmt.Sprintf("theme %q", l.Theme)
		case len(o.App) > 0 && !containsFold(o.App, l.App):
			r.skip, r.detail = SkipApp, fmt.Sprintf("app %q", l.App)
		}
		if r.skip != "" {
			return nil
		}
		for _, rel := range []string{l.Shot, l.ATSPI, l.OCR} {
			if n, ok := claimed[rel]; ok && rel != "" {
				r.skip, r.detail = SkipDuplicate, fmt.Sprintf("%s is exported by line %d already", rel, n)
				return nil
			}
		}
		for _, rel := range []string{l.Shot, l.ATSPI, l.OCR} {
			if rel != "" {
				claimed[rel] = r.n
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dataset index: %w", err)
	}
	return rows, nil
}

// resolve finds the line's files inside the capture. A path that could
// leave it skips the line (path_refused); a file that is not there is
// noted for checkRows.
func (r *row) resolve(root string) bool {
	for _, f := range []struct {
		rel, suffix string
		abs         *string
		missing     func()
	}{
		{r.line.Shot, PNGSuffix, &r.shot, func() { r.skip, r.detail = SkipShotMissing, r.line.Shot+" is not on disk" }},
		{r.line.ATSPI, ATSPISuffix, &r.atspi, func() { r.atspiDrop = ATSPIMissing }},
		{r.line.OCR, OCRSuffix, &r.ocr, func() { r.ocrDrop = OCRMissing }},
	} {
		if f.rel == "" {
			continue
		}
		abs, err := confined(root, f.rel, f.suffix)
		var ref *refusal
		switch {
		case errors.As(err, &ref):
			r.skip, r.detail = SkipPathRefused, ref.why
			return false
		case errors.Is(err, fs.ErrNotExist):
			f.missing()
		case err != nil:
			r.skip, r.detail = SkipPathRefused, err.Error()
			return false
		default:
			*f.abs = abs
		}
	}
	return true
}

// checkRows reads every remaining shot and its sidecars (workers at a
// time), applies the rules their contents decide, and copies what passes
// into tmp (unless it is ""): the PNG, the dump and the OCR file only.
func checkRows(ctx context.Context, rows []*row, p *paths, o Options, bench *evalSet, tmp string, workers int) error {
	var done atomic.Int64
	var progress sync.Mutex
	return parallel(ctx, len(rows), workers, func(i int) error {
		r := rows[i]
		if r.skip == "" {
			if err := r.check(o, bench, tmp); err != nil {
				return err
			}
		}
		if o.Progress != nil {
			progress.Lock()
			o.Progress(int(done.Add(1)), len(rows))
			progress.Unlock()
		}
		return nil
	})
}

// check applies the file rules to one row and copies it out. An error is
// the export's own failure (a disk error in tmp), not the row's.
func (r *row) check(o Options, bench *evalSet, tmp string) error {
	frame, err := os.ReadFile(r.shot)
	if err != nil {
		r.skip, r.detail = SkipShotMissing, err.Error()
		return nil
	}
	img, err := png.Decode(bytes.NewReader(frame))
	if err != nil {
		r.skip, r.detail = SkipShotBad, fmt.Sprintf("%s: %v", r.line.Shot, err)
		return nil
	}
	if bench != nil && bench.shows(frame, FingerprintOf(img)) {
		r.skip, r.detail = SkipEvalFrame, "the frame shows a benchmark frame's screen"
		return nil
	}
	size := [2]int{img.Bounds().Dx(), img.Bounds().Dy()}
	dump := r.checkDump(size)
	if r.atspiDrop != "" && o.RequireATSPI {
		r.skip, r.detail = r.atspiDrop, "no usable AT-SPI dump (--require-atspi): "+r.atspiDrop
		return nil
	}
	var ocr []byte
	if r.line.OCR != "" && r.ocrDrop == "" {
		if ocr, err = os.ReadFile(r.ocr); err != nil {
			r.ocrDrop = OCRMissing
		} else if _, err := ParseOCR(ocr); err != nil {
			r.ocrDrop, ocr = OCRUnreadable, nil
		}
	}
	if dump == nil && ocr == nil {
		r.skip, r.detail = SkipNoTruth, "neither a usable AT-SPI dump nor OCR words"
		return nil
	}
	if tmp == "" {
		return nil
	}
	if err := copyOut(tmp, r.line.Shot, frame); err != nil {
		return err
	}
	if dump != nil {
		if err := copyOut(tmp, r.line.ATSPI, dump); err != nil {
			return err
		}
	}
	if ocr != nil {
		return copyOut(tmp, r.line.OCR, ocr)
	}
	return nil
}

// checkDump reads the row's dump and answers the bytes to export, or nil
// with atspiDrop saying why none goes out.
func (r *row) checkDump(frame [2]int) []byte {
	l := &r.line
	switch {
	case r.atspiDrop != "":
		return nil
	case l.ATSPI == "":
		r.atspiDrop = ATSPINone
		return nil
	}
	b, err := os.ReadFile(r.atspi)
	if err != nil {
		r.atspiDrop = ATSPIMissing
		return nil
	}
	d, err := ParseDump(b)
	switch {
	case err != nil:
		r.atspiDrop = ATSPIUnreadable
	case len(d.Widgets) == 0 && d.Error != "":
		r.atspiDrop = ATSPIErrorOnly
	case len(d.Widgets) == 0:
		r.atspiDrop = ATSPIEmpty
	case l.FrameW != frame[0] || l.FrameH != frame[1]:
		r.atspiDrop = ATSPISizes // the PNG is not the frame the line describes
	case l.Rescaled != nil:
		if l.Rescaled.To != frame {
			r.atspiDrop = ATSPISizes
		}
	case d.Logical() || l.CoordSpace == "logical":
		screen, ok := d.logicalScreen(frame[0], frame[1])
		if !ok {
			r.atspiDrop = ATSPIUnplaceable
			break
		}
		if screen != frame {
			d = d.scaled(screen, frame)
			if b, err = json.Marshal(d); err != nil {
				r.atspiDrop = ATSPIUnreadable
				break
			}
			r.placed = &Rescale{From: screen, To: frame}
		}
	case l.GuestW != frame[0] || l.GuestH != frame[1]:
		r.atspiDrop = ATSPISizes
	}
	if r.atspiDrop != "" {
		return nil
	}
	hard := d.Hard()
	r.hard = &hard
	return b
}

// copyOut writes one file of the export under its index path, synced.
func copyOut(tmp, rel string, data []byte) error {
	dst := filepath.Join(tmp, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return err
	}
	return writeSynced(dst, data)
}

// tally counts the rows into the report, splits the exported ones by
// session and answers the two halves' index lines.
func tally(rows []*row, o Options, rep *Report) (train, val []Line) {
	var kept []*row
	sessions := map[string]bool{}
	for _, r := range rows {
		if r.skip != "" {
			rep.Skipped[r.skip]++
			if len(rep.SkipDetails) < maxDetails {
				rep.SkipDetails = append(rep.SkipDetails, SkipDetail{Line: r.n, Shot: r.line.Shot, Code: r.skip, Detail: r.detail})
			} else {
				rep.DetailsCut++
			}
			continue
		}
		kept = append(kept, r)
		sessions[r.session] = true
	}
	names := make([]string, 0, len(sessions))
	for s := range sessions {
		names = append(names, s)
	}
	slices.Sort(names)
	toVal := splitSessions(names, o.Seed, o.ValFraction)
	for s := range sessions {
		if toVal[s] {
			rep.Val.Sessions++
		} else {
			rep.Train.Sessions++
		}
	}
	for _, r := range kept {
		l := r.line
		l.Session = r.session
		if r.atspiDrop != "" {
			rep.ATSPIDropped[r.atspiDrop]++
			l.ATSPI, l.ATSPIWidgets, l.Hard = "", 0, nil
		} else {
			rep.WithATSPI++
			l.Hard = r.hard
			rep.HardScreenBase++
			if *r.hard {
				rep.HardScreens++
			}
		}
		if r.placed != nil {
			l.Rescaled = r.placed
			rep.PlacedLogical++
		}
		if r.ocrDrop != "" {
			rep.OCRDropped[r.ocrDrop]++
			l.OCR = ""
		} else if l.OCR != "" {
			rep.WithOCR++
		}
		if l.Click != nil {
			rep.Clicks++
		}
		if l.Drag != nil {
			rep.Drags++
		}
		if l.IsClick() {
			rep.ClicksIntent++
		}
		count(rep.ByLocale, l.Locale)
		count(rep.ByTheme, l.Theme)
		count(rep.ByApp, l.App)
		count(rep.ByOrigin, l.Origin)
		rep.Exported++
		if toVal[r.session] {
			rep.Val.Frames++
			val = append(val, l)
		} else {
			rep.Train.Frames++
			train = append(train, l)
		}
	}
	rep.HardScreenShare = share(rep.HardScreens, rep.HardScreenBase)
	rep.Warnings = append(rep.Warnings, rep.Hard.warnings()...)
	if rep.Exported == 0 {
		rep.Warnings = append(rep.Warnings, "nothing exported: see skipped")
	}
	if o.ValFraction > 0 && rep.Val.Sessions == 0 {
		rep.Warnings = append(rep.Warnings, "one session only: nothing for validation")
	}
	return train, val
}

// parallel runs fn(0..n-1) on workers goroutines, stopping at the first
// error or when ctx ends.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range max(1, min(workers, n)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = fn(i)
				}
				if err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err() // the caller's context ended after the last item
	}
	return first
}

func normalized(locales []string) []string {
	var out []string
	for _, l := range locales {
		out = append(out, NormalizeLocale(l))
	}
	return out
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(v string) bool { return strings.EqualFold(v, s) })
}

// evalSet is the benchmark as the export checks against it: its session
// names, its images' bytes and fingerprints.
type evalSet struct {
	sessions   map[string]bool
	digests    map[[32]byte]bool
	prints     []*Fingerprint
	unreadable int
}

// shows says whether a frame (its file's bytes, its fingerprint) is one of
// the benchmark's screens.
func (e *evalSet) shows(frame []byte, fp *Fingerprint) bool {
	if e.digests[sha256.Sum256(frame)] {
		return true
	}
	for _, p := range e.prints {
		if p.Matches(fp) {
			return true
		}
	}
	return false
}

// loadEval reads the benchmark: every directory name and every session
// its JSON-lines files name is a session that stays out, every PNG or
// JPEG a screen that does. Symlinked files are followed: the benchmark is
// the operator's own.
func loadEval(ctx context.Context, dir string, workers int) (*evalSet, error) {
	e := &evalSet{sessions: map[string]bool{}, digests: map[[32]byte]bool{}}
	var images []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir {
				e.sessions[d.Name()] = true
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		switch ext := strings.ToLower(filepath.Ext(p)); ext {
		case ".png", ".jpg", ".jpeg":
			images = append(images, p)
		case ".jsonl":
			return e.readSessions(p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("benchmark: %w", err)
	}
	prints := make([]*Fingerprint, len(images))
	digests := make([][32]byte, len(images))
	err = parallel(ctx, len(images), workers, func(i int) error {
		b, err := os.ReadFile(images[i])
		if err != nil {
			return fmt.Errorf("benchmark: %w", err)
		}
		digests[i] = sha256.Sum256(b)
		if img, err := decodeImage(b); err == nil {
			prints[i] = FingerprintOf(img)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range images {
		e.digests[digests[i]] = true
		if prints[i] == nil {
			e.unreadable++
			continue
		}
		e.prints = append(e.prints, prints[i])
	}
	return e, nil
}

// readSessions adds the sessions a benchmark's JSON-lines file names (its
// session fields, and the directory of its shot paths).
func (e *evalSet) readSessions(file string) error {
	return ReadIndex(file, func(ie IndexEntry) error {
		// A line without a shot still names its session; one that is not
		// JSON names nothing (its fields stay empty).
		if ie.Line.Session != "" {
			e.sessions[ie.Line.Session] = true
		}
		if dir := path.Dir(ie.Line.Shot); dir != "." && dir != "/" {
			e.sessions[path.Base(dir)] = true
		}
		return nil
	})
}

// decodeImage decodes a PNG or a JPEG.
func decodeImage(b []byte) (image.Image, error) {
	img, _, err := image.Decode(bytes.NewReader(b))
	return img, err
}
