// Package ocr reads the text on a screen with tesseract: it finds the text
// itself (layout.go), prepares each piece as black on white at a size the
// recogniser likes (prepare.go), and reads the pieces on a small pool of
// engines, each owned by one worker for the process's lifetime. Pieces
// already read are remembered by their pixels, so a frame where a few
// lines changed costs only those lines.
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
	Reads, LinesRead, LinesCached int64
	Total                         time.Duration
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

	cache *lineCache

	reads, linesRead, linesCached, nanos atomic.Int64
}

// New makes a reader; the engines start on the first read (or Check), so a
// server that never reads the screen never loads tesseract.
func New(cfg Config) *Reader {
	cfg = cfg.withDefaults()
	return &Reader{cfg: cfg, cache: newLineCache(cfg.CacheLines), stop: make(chan struct{})}
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
	api, err := tess.New(r.cfg.DataDir, r.cfg.Languages)
	if err == nil {
		// Crops come prepared: tesseract's own retry on the inverted
		// image would only double the work.
		err = api.Set("tessedit_do_invert", "0")
	}
	if err == nil {
		// Screen fonts are small: at the default (10 px) tesseract drops
		// the lines of a 6x13 font as noise unless they are scaled up.
		err = api.Set("textord_min_xheight", "4")
	}
	ready <- err
	if err != nil {
		if api != nil {
			api.Close()
		}
		return
	}
	defer api.Close()
	for {
		select {
		case <-r.stop:
			return
		case j := <-r.jobs:
			tsv, err := api.Read(j.crop.pix, j.crop.w, j.crop.h, tess.PSMLine)
			if err == nil {
				j.words = parseTSV(tsv)
			}
			j.err = err
			j.done <- j
		}
	}
}

// Close stops the engines.
func (r *Reader) Close() {
	r.startOnce.Do(func() { r.startErr = errors.New("ocr: reader closed") })
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.workers.Wait()
}

// Stats answers the counters.
func (r *Reader) Stats() Stats {
	return Stats{Reads: r.reads.Load(), LinesRead: r.linesRead.Load(), LinesCached: r.linesCached.Load(), Total: time.Duration(r.nanos.Load())}
}

// job is one crop to recognise.
type job struct {
	crop  prepared
	key   uint64
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
	b := img.Bounds()
	if b.Min != (image.Point{}) {
		return Page{}, fmt.Errorf("ocr: the frame must start at 0,0 (got %v)", b)
	}
	w, h := b.Dx(), b.Dy()
	px := rgb(img)
	gs := groups(px, w, h, blobs(inkMask(px, w, h), w, h))

	// The pieces to read: each group; when only a few are new (a frame
	// where a line or two changed), a long one is cut in two at a word gap
	// so that two workers share it. Cold frames keep their lines whole:
	// there is work for every worker, and a line reads best in one piece.
	type piece struct {
		group int
		box   image.Rectangle
		words []Word
	}
	pieces := make([]piece, 0, len(gs))
	fresh := 0
	for i, g := range gs {
		pieces = append(pieces, piece{group: i, box: g})
		if _, ok := r.cache.peek(cropKey(img, g)); !ok {
			fresh++
		}
	}
	if fresh < 2*r.cfg.Workers {
		var cut []piece
		for _, pc := range pieces {
			if _, ok := r.cache.peek(cropKey(img, pc.box)); ok {
				cut = append(cut, pc)
				continue
			}
			for _, box := range halves(px, w, h, pc.box) {
				cut = append(cut, piece{group: pc.group, box: box})
			}
		}
		pieces = cut
	}
	var todo []*job
	same := map[uint64][]int{} // pieces of equal pixels are read once
	page := Page{}
	for i, pc := range pieces {
		key := cropKey(img, pc.box)
		if ws, ok := r.cache.get(key); ok {
			pieces[i].words = place(ws, pc.box.Min)
			page.Cached++
			continue
		}
		if _, ok := same[key]; !ok {
			todo = append(todo, &job{crop: prepare(px, w, h, pc.box, scaleFor(gs[pc.group].Dy())), key: key})
		}
		same[key] = append(same[key], i)
	}
	if err := r.recognise(ctx, todo); err != nil {
		return Page{}, err
	}
	for _, j := range todo {
		rel := j.crop.toFrame(j.words)
		r.cache.put(j.key, rel)
		for _, i := range same[j.key] {
			pieces[i].words = place(rel, pieces[i].box.Min)
		}
		page.Read++
	}
	results := make([][]Word, len(gs))
	for _, pc := range pieces { // in order: a group's left half first
		results[pc.group] = append(results[pc.group], pc.words...)
	}
	for i, g := range gs {
		l, ok := line(results[i])
		if !ok {
			continue
		}
		l.Selected = onBar(px, w, h, g)
		page.Lines = append(page.Lines, l)
	}
	page.Took = time.Since(start)
	r.reads.Add(1)
	r.linesRead.Add(int64(page.Read))
	r.linesCached.Add(int64(page.Cached))
	r.nanos.Add(int64(page.Took))
	return page, nil
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

// line makes a line of words, or says there is none: no words, or only a
// stray mark (a text cursor reads as "|").
func line(ws []Word) (Line, bool) {
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
	if len([]rune(l.Text)) < 2 && !strings.ContainsFunc(l.Text, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		return Line{}, false
	}
	return l, true
}
