// Package ocr reads the text on a screen: it finds the text itself
// (layout.go), reads text on a character grid cell by cell from an atlas
// of glyphs (grid.go, atlas.go), and the rest with tesseract: each piece
// prepared as black on white at a size the recogniser likes (prepare.go)
// and read on a small pool of engines, each owned by one worker for the
// process's lifetime. Every word comes out in one script (script.go).
// Pieces already read are remembered by their pixels, and the last frames
// read by their layout (frames.go), so a frame where a few lines changed
// costs only those lines.
package ocr

import (
	"context"
	"errors"
	"fmt"
	"image"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/cespare/xxhash/v2"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/ocr/internal/tess"
)

// ErrUnavailable wraps every reason OCR cannot run on this machine or in
// this build (no cgo, no libtesseract, no language data); its text names
// what is missing.
var ErrUnavailable = tess.ErrUnavailable

// Config chooses the languages and the pool.
type Config struct {
	Languages string // tesseract's form, "rus+eng" (the default)
	Workers   int    // engines; default: the CPUs, at most 4
	DataDir   string // default: TESSDATA_PREFIX, else Debian's tessdata
	// CacheLines bounds the lines remembered by their pixels (default
	// 20000: a few hundred screens of text, a few MB).
	CacheLines int
	// AtlasFile keeps the character cells learned from tesseract's reads
	// across restarts ("": learned cells last as long as the process);
	// written now and then and when the reader closes.
	AtlasFile string
	// AtlasCells bounds the cells learned (default 65536, 16 bytes each
	// on disk, about 64 in memory).
	AtlasCells int
}

func (c Config) withDefaults() Config {
	if c.Languages == "" {
		c.Languages = "rus+eng"
	}
	if c.Workers <= 0 {
		c.Workers = min(runtime.NumCPU(), 4)
	}
	if c.DataDir == "" {
		c.DataDir = tess.DataDir()
	}
	if c.CacheLines <= 0 {
		c.CacheLines = 20000
	}
	if c.AtlasCells <= 0 {
		c.AtlasCells = 65536
	}
	return c
}

// What a read answers (backends' TextPage, so hostapi reads a page
// without importing this package).
type (
	Line = backends.TextLine
	Word = backends.TextWord
	Page = backends.TextPage
)

// Stats are counters since the reader opened.
type Stats struct {
	Reads, LinesRead, LinesCached, LinesGrid int64
	Total                                    time.Duration
	// The atlas: the seed's cells, the cells learned, those confirmed
	// (answered) and those reads disagree on (not answered).
	AtlasSeed, AtlasLearned, AtlasConfirmed, AtlasDisputed int
	// AtlasProblem says why the atlas file could not be read or written,
	// if it could not.
	AtlasProblem string
}

// Reader reads frames. It is safe for concurrent use.
type Reader struct {
	cfg Config

	startOnce sync.Once
	startErr  error
	started   atomic.Bool // start has run: startErr is its answer
	jobs      chan *job
	stop      chan struct{}
	workers   sync.WaitGroup

	cache   *lineCache
	atlas   *atlas
	frames  frames
	saveErr atomic.Pointer[error]

	reads, linesRead, linesCached, linesGrid, nanos atomic.Int64
}

// New makes a reader; the engines start on the first read (or Check), so a
// server that never reads the screen never loads tesseract.
func New(cfg Config) *Reader {
	cfg = cfg.withDefaults()
	return &Reader{cfg: cfg, cache: newLineCache(cfg.CacheLines), atlas: newAtlas(cfg.AtlasFile, cfg.AtlasCells), stop: make(chan struct{})}
}

// Languages answers the languages read.
func (r *Reader) Languages() string { return r.cfg.Languages }

// Check starts the engines if they are not yet running and answers why
// they cannot run, if they cannot (ErrUnavailable).
func (r *Reader) Check() error {
	r.startOnce.Do(r.start)
	return r.startErr
}

// Available answers, without loading or starting anything, whether the
// library and the language data are here (once the engines have started,
// what starting them answered): for readiness reports, which must not cost
// a server that never reads the screen tesseract's memory.
func (r *Reader) Available() error {
	if r.started.Load() {
		return r.startErr
	}
	if err := tess.CheckLanguages(r.cfg.DataDir, r.cfg.Languages); err != nil {
		return err
	}
	return tess.Find()
}

func (r *Reader) start() {
	r.jobs = make(chan *job)
	ready := make(chan error, r.cfg.Workers)
	for i := 0; i < r.cfg.Workers; i++ {
		r.workers.Add(1)
		go r.work(ready)
	}
	for i := 0; i < r.cfg.Workers; i++ {
		if err := <-ready; err != nil && r.startErr == nil {
			r.startErr = err
		}
	}
	if r.startErr != nil {
		close(r.stop)
		r.workers.Wait()
	}
	r.started.Store(true)
}

// work owns one engine on one OS thread until the reader closes.
func (r *Reader) work(ready chan<- error) {
	defer r.workers.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The engine of the configured languages, and those of one language
	// each, made when a word is first read again in one script.
	engines := map[string]*tess.API{}
	defer func() {
		for _, api := range engines {
			api.Close()
		}
	}()
	engine := func(langs string) (*tess.API, error) {
		if api, ok := engines[langs]; ok {
			return api, nil
		}
		api, err := tess.New(r.cfg.DataDir, langs)
		if err == nil {
			// Crops come prepared: tesseract's own retry on the inverted
			// image would only double the work.
			err = api.Set("tessedit_do_invert", "0")
		}
		if err == nil {
			// Screen fonts are small: at the default (10 px) tesseract
			// drops the lines of a 6x13 font as noise unless they are
			// scaled up.
			err = api.Set("textord_min_xheight", "4")
		}
		if err != nil {
			if api != nil {
				api.Close()
			}
			return nil, err
		}
		engines[langs] = api
		return api, nil
	}
	_, err := engine(r.cfg.Languages)
	ready <- err
	if err != nil {
		return
	}
	for {
		select {
		case <-r.stop:
			return
		case j := <-r.jobs:
			langs, psm := r.cfg.Languages, tess.PSMLine
			if j.langs != "" {
				langs, psm = j.langs, tess.PSMLine
			}
			api, err := engine(langs)
			if err == nil {
				var tsv string
				if tsv, err = api.Read(j.crop.pix, j.crop.w, j.crop.h, psm); err == nil {
					j.words = parseTSV(tsv)
				}
			}
			j.err = err
			j.done <- j
		}
	}
}

// Close stops the engines and writes the atlas file.
func (r *Reader) Close() {
	if err := r.atlas.save(); err != nil {
		r.saveErr.Store(&err)
	}
	r.startOnce.Do(func() { r.startErr = errors.New("ocr: reader closed") })
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.workers.Wait()
}

// forget drops what the reader remembers of earlier frames: the lines it
// read and the cells it learned (tests and benchmarks: a cold read).
func (r *Reader) forget() {
	r.cache = newLineCache(r.cfg.CacheLines)
	r.atlas = newAtlas("", r.cfg.AtlasCells)
	r.frames = frames{}
}

// Stats answers the counters.
func (r *Reader) Stats() Stats {
	s := Stats{Reads: r.reads.Load(), LinesRead: r.linesRead.Load(), LinesCached: r.linesCached.Load(), LinesGrid: r.linesGrid.Load(), Total: time.Duration(r.nanos.Load())}
	s.AtlasSeed, s.AtlasLearned, s.AtlasConfirmed, s.AtlasDisputed = r.atlas.stats()
	if err := r.atlas.loadErr; err != nil {
		s.AtlasProblem = err.Error()
	}
	if err := r.saveErr.Load(); err != nil {
		s.AtlasProblem = (*err).Error()
	}
	return s
}

// job is one crop to recognise.
type job struct {
	crop  prepared
	key   uint64
	langs string // "": the configured languages, a line; else one word in these
	words []word
	err   error
	done  chan *job
}

// Read reads a frame.
func (r *Reader) Read(ctx context.Context, img *image.RGBA) (Page, error) {
	start := time.Now()
	if err := r.Check(); err != nil {
		return Page{}, err
	}
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	b := img.Bounds()
	if b.Min != (image.Point{}) {
		return Page{}, fmt.Errorf("ocr: the frame must start at 0,0 (got %v)", b)
	}
	page := Page{}
	// A frame like one read before is laid out again only where it
	// differs (frames.go); the rest keeps what was read.
	m, fresh := r.frames.take(img)
	var kept []groupResult
	var gs []image.Rectangle
	if fresh {
		gs = m.layout(img)
	} else {
		kept, gs = m.relayout(img)
		page.Cached += len(kept)
	}
	read, err := r.readGroups(ctx, img, m.px, m.ink, gs, &page)
	if err != nil {
		return Page{}, err // the memo is dropped: it holds this frame's pixels, not its reading
	}
	m.results = sortResults(append(kept, read...))
	selections(m.results)
	r.frames.give(m)

	// Every word's script, then the lines.
	var words [][]*draftWord
	for _, g := range m.results {
		words = append(words, g.lines...)
	}
	chooseScripts(words)
	for _, g := range m.results {
		for _, dl := range g.lines {
			var ws []Word
			for _, dw := range dl {
				ws = append(ws, Word{Box: dw.box, Text: dw.text(), Conf: dw.conf})
			}
			l, ok := line(ws, dl != nil && dl[0].grid)
			if !ok {
				continue
			}
			l.Selected = g.selected
			page.Lines = append(page.Lines, l)
		}
	}
	if err := r.atlas.saveSoon(); err != nil && r.saveErr.Load() == nil {
		r.saveErr.Store(&err)
	}
	page.Took = time.Since(start)
	r.reads.Add(1)
	r.linesRead.Add(int64(page.Read))
	r.linesCached.Add(int64(page.Cached))
	r.linesGrid.Add(int64(page.Grid))
	r.nanos.Add(int64(page.Took))
	return page, nil
}

// groupResult is what a group of text read as: its lines (words before
// their script is chosen) and whether it stands on a highlight bar.
type groupResult struct {
	box      image.Rectangle
	lines    [][]*draftWord
	ground   uint32
	bar      bar
	onBar    bool
	selected bool // on a bar, among text of other grounds, no title (selected.go)
}

// sortResults orders groups as the layout does: top to bottom, left to
// right.
func sortResults(rs []groupResult) []groupResult {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].box.Min.Y != rs[j].box.Min.Y {
			return rs[i].box.Min.Y < rs[j].box.Min.Y
		}
		return rs[i].box.Min.X < rs[j].box.Min.X
	})
	return rs
}

// readGroups reads groups gs of the frame img (px its colours, ink its ink
// mask).
func (r *Reader) readGroups(ctx context.Context, img *image.RGBA, px []uint32, ink []bool, gs []image.Rectangle, page *Page) ([]groupResult, error) {
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	// Groups on a character grid whose every cell the atlas knows are
	// read from it; the rest go to tesseract. Where a grid fits a group
	// but some of its cells are new, tesseract's answer may teach them.
	grid := newGridReader(r.atlas, px, ink, w, h)
	gridded := make([]*gridRead, len(gs))
	partial := make([]*gridRead, len(gs))
	for i, g := range gs {
		gr, ok := grid.read(g)
		switch {
		case ok:
			gridded[i] = &gr
		case gr.cells != nil && 2*gr.unknown <= gr.inked:
			partial[i] = &gr
		}
	}

	// The pieces to read: each group; when only a few are new (a frame
	// where a line or two changed), a long one is cut in two at a word gap
	// so that two workers share it. Cold frames keep their lines whole:
	// there is work for every worker, and a line reads best in one piece.
	type piece struct {
		group   int
		stretch int // of a group on a grid: which stretch of unknown cells
		box     image.Rectangle
		key     uint64
		words   []Word
		fresh   bool // read now, not remembered: an observation for the atlas
	}
	pieces := make([]piece, 0, len(gs))
	fresh := 0
	add := func(pc piece) {
		pc.key = cropKey(img, pc.box)
		if _, ok := r.cache.peek(pc.key); !ok {
			fresh++
		}
		pieces = append(pieces, pc)
	}
	for i, g := range gs {
		if gridded[i] != nil {
			continue
		}
		if gr := partial[i]; gr != nil {
			// On a grid, only the stretches of cells the atlas does not
			// know go to tesseract.
			gr.pending = gr.stretches()
			for k, st := range gr.pending {
				add(piece{group: i, stretch: k, box: gr.stretchBox(st)})
			}
			continue
		}
		add(piece{group: i, stretch: -1, box: g})
	}
	if fresh < 2*r.cfg.Workers {
		var cut []piece
		for _, pc := range pieces {
			if _, ok := r.cache.peek(pc.key); ok || pc.stretch >= 0 {
				cut = append(cut, pc) // a grid's stretch stays whole: it learns from it
				continue
			}
			for _, box := range halves(px, w, h, pc.box) {
				cut = append(cut, piece{group: pc.group, stretch: -1, box: box, key: cropKey(img, box)})
			}
		}
		pieces = cut
	}
	var todo []*job
	same := map[uint64][]int{} // pieces of equal pixels are read once
	for i, pc := range pieces {
		if ws, ok := r.cache.get(pc.key); ok {
			pieces[i].words = place(ws, pc.box.Min)
			page.Cached++
			continue
		}
		if _, ok := same[pc.key]; !ok {
			scale := scaleFor(gs[pc.group].Dy())
			if pc.stretch >= 0 {
				// A few cells the atlas does not know, one by one:
				// small, and read best large.
				scale = max(scale, stretchScale)
			}
			todo = append(todo, &job{crop: prepare(px, w, h, pc.box, scale), key: pc.key})
		}
		same[pc.key] = append(same[pc.key], i)
	}
	if err := r.recognise(ctx, todo); err != nil {
		return nil, err
	}
	for _, j := range todo {
		rel := j.crop.toFrame(j.words)
		r.cache.put(j.key, rel)
		for n, i := range same[j.key] {
			pieces[i].words = place(rel, pieces[i].box.Min)
			pieces[i].fresh = n == 0 // equal pieces are one read
		}
		page.Read++
	}
	results := make([][]Word, len(gs))
	stretched := make([]map[int][]Word, len(gs))
	for _, pc := range pieces { // in order: a group's left half first
		if pc.stretch < 0 {
			results[pc.group] = append(results[pc.group], pc.words...)
			continue
		}
		if stretched[pc.group] == nil {
			stretched[pc.group] = map[int][]Word{}
		}
		stretched[pc.group][pc.stretch] = pc.words
		if pc.fresh {
			r.learnFrom(*partial[pc.group], partial[pc.group].pending[pc.stretch], pc.words)
		}
	}
	// What the reads taught may answer their cells now, better than any
	// one read (a cell two reads agreed on, where a third misread it).
	for _, gr := range partial {
		if gr != nil {
			gr.lookupAgain(r.atlas)
		}
	}

	out := make([]groupResult, len(gs))
	for i, g := range gs {
		out[i] = groupResult{box: g, ground: ground(px, w, h, g)}
		out[i].bar, out[i].onBar = barOf(px, w, h, g)
		switch gr := gridded[i]; {
		case gr != nil:
			out[i].lines = gr.segments(nil)
			page.Grid++
		case partial[i] != nil:
			out[i].lines = partial[i].segments(stretched[i])
		default:
			var ws []*draftWord
			for _, wd := range results[i] {
				dw := &draftWord{box: wd.Box, conf: wd.Conf}
				for _, c := range wd.Text {
					dw.cands = append(dw.cands, []rune{c})
				}
				ws = append(ws, dw)
			}
			out[i].lines = [][]*draftWord{ws}
		}
	}
	if err := r.reread(ctx, out, img, px, page); err != nil {
		return nil, err
	}
	return out, nil
}

// recognise reads the jobs on the workers, the largest first so that the
// workers finish together.
func (r *Reader) recognise(ctx context.Context, todo []*job) error {
	sort.Slice(todo, func(a, b int) bool { return len(todo[a].crop.pix) > len(todo[b].crop.pix) })
	done := make(chan *job, len(todo))
	go func() {
		for _, j := range todo {
			j.done = done
			select {
			case r.jobs <- j:
			case <-ctx.Done():
				return
			case <-r.stop:
				return
			}
		}
	}()
	for range todo {
		select {
		case j := <-done:
			if j.err != nil {
				return j.err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stop:
			return errors.New("ocr: reader closed")
		}
	}
	return nil
}

// cropKey hashes a crop's pixels and size: the same pixels read the same
// wherever they are on screen.
func cropKey(img *image.RGBA, c image.Rectangle) uint64 {
	d := xxhash.New()
	var size [8]byte
	size[0], size[1], size[2], size[3] = byte(c.Dx()), byte(c.Dx()>>8), byte(c.Dy()), byte(c.Dy()>>8)
	d.Write(size[:])
	for y := c.Min.Y; y < c.Max.Y; y++ {
		d.Write(img.Pix[y*img.Stride+c.Min.X*4 : y*img.Stride+c.Max.X*4])
	}
	return d.Sum64()
}

// toFrame maps the words tesseract read on a prepared crop to frame pixels
// relative to the crop's origin (the form the cache keeps).
func (p prepared) toFrame(ws []word) []Word {
	out := make([]Word, 0, len(ws))
	back := func(v int) int { return max(0, (v-pad)/p.scale) }
	for _, w := range ws {
		out = append(out, Word{
			Box:  image.Rect(back(w.box.Min.X), back(w.box.Min.Y), back(w.box.Max.X+p.scale-1), back(w.box.Max.Y+p.scale-1)),
			Text: w.text,
			Conf: w.conf,
		})
	}
	return out
}

// place moves relative words to a crop's origin.
func place(ws []Word, at image.Point) []Word {
	out := make([]Word, len(ws))
	for i, w := range ws {
		w.Box = w.Box.Add(at)
		out[i] = w
	}
	return out
}

// line makes a line of words, or says there is none: no words, or, from
// tesseract, only a stray mark (a text cursor reads as "|"; the atlas
// knows a "#" from a cursor).
func line(ws []Word, exact bool) (Line, bool) {
	if len(ws) == 0 {
		return Line{}, false
	}
	var texts []string
	l := Line{Words: ws}
	for _, w := range ws {
		texts = append(texts, w.Text)
		l.Box = l.Box.Union(w.Box)
		l.Conf += w.Conf
	}
	l.Conf /= float64(len(ws))
	l.Text = strings.Join(texts, " ")
	if !exact && len([]rune(l.Text)) < 2 && !strings.ContainsFunc(l.Text, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		return Line{}, false
	}
	return l, true
}
