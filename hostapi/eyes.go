package hostapi

import (
	"context"
	"errors"
	"fmt"
	"image"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Eyes read the screen for every caller of the process: OCR, the vision
// model's element lists (cached by frame digest, whoever asks), and the
// grounding model. Set up once at start.
type Eyes struct {
	OCR       TextReader   // nil: no OCR
	Vision    ElementModel // nil: no vision model (ui_see refuses)
	Grounding ElementModel // nil: the vision model grounds too
	// SeeAlways adds the element list to every screenshot answer.
	SeeAlways bool

	elements elementCache
}

// TextReader reads a frame's text (backends/ocr's Reader). A read it cannot
// make on this machine fails with backends.ErrOCRUnavailable.
type TextReader interface {
	Read(ctx context.Context, img *image.RGBA) (backends.TextPage, error)
}

// ElementModel is a vision model (backends/vision's Client): it lists a
// frame's UI elements and points at a label (a point it cannot give fails
// with backends.ErrNoPoint).
type ElementModel interface {
	ListElements(ctx context.Context, img *image.RGBA) (backends.ElementList, error)
	Point(ctx context.Context, img *image.RGBA, label, kind string) (image.Point, error)
	// ListKey names what a list of a w x h frame depends on beside its
	// pixels (the model, its prompt, the size sent).
	ListKey(w, h int) string
}

// The element cache, as the manual has it: by frame digest, 300 s, at most
// 512 frames, one model call per frame however many ask at once.
const (
	elementTTL  = 300 * time.Second
	elementsCap = 512
)

type elementEntry struct {
	done  chan struct{}
	list  backends.ElementList
	err   error
	added time.Time
}

type elementCache struct {
	mu      sync.Mutex
	entries map[string]*elementEntry
	order   []string
	hits    int64
}

// get answers the frame's element list: from the cache, from a call in
// flight for the same frame, or from fn. Only complete lists stay.
func (c *elementCache) get(ctx context.Context, key string, fn func() (backends.ElementList, error)) (backends.ElementList, bool, error) {
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*elementEntry{}
	}
	c.expireLocked(time.Now())
	if e, ok := c.entries[key]; ok {
		c.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return backends.ElementList{}, false, ctx.Err()
		}
		if e.err == nil && e.list.Complete {
			c.mu.Lock()
			c.hits++
			c.mu.Unlock()
			return e.list, true, nil
		}
		// The call it waited on failed or was incomplete: ask anew.
		return c.get(ctx, key, fn)
	}
	e := &elementEntry{done: make(chan struct{}), added: time.Now()}
	c.entries[key] = e
	c.order = append(c.order, key)
	for len(c.order) > elementsCap {
		delete(c.entries, c.order[0])
		c.order = c.order[1:]
	}
	c.mu.Unlock()

	e.list, e.err = fn()
	if e.err != nil || !e.list.Complete {
		c.mu.Lock()
		if c.entries[key] == e {
			delete(c.entries, key)
		}
		c.mu.Unlock()
	}
	close(e.done)
	return e.list, false, e.err
}

func (c *elementCache) expireLocked(now time.Time) {
	for len(c.order) > 0 {
		e, ok := c.entries[c.order[0]]
		if ok && now.Sub(e.added) < elementTTL {
			return
		}
		if ok {
			select {
			case <-e.done:
				delete(c.entries, c.order[0])
			default:
				return // in flight: not expired yet
			}
		}
		c.order = c.order[1:]
	}
}

// CacheStats answers the element cache's hits and size.
func (e *Eyes) CacheStats() (hits int64, entries int) {
	e.elements.mu.Lock()
	defer e.elements.mu.Unlock()
	return e.elements.hits, len(e.elements.entries)
}

func (v *VM) eyes() *Eyes { return v.c.env.Eyes }

// noOCR is the refusal when OCR cannot run.
func (v *VM) ocr() (TextReader, error) {
	e := v.eyes()
	if e == nil || e.OCR == nil {
		return nil, Failf("this server runs without OCR: see [ocr] in the config", "OCR is not set up")
	}
	return e.OCR, nil
}

// Reading is what OCR read on one frame.
type Reading struct {
	Frame Frame
	Page  backends.TextPage
}

// Read takes a screenshot and reads its text.
func (v *VM) Read(ctx context.Context) (Reading, error) {
	r, err := v.ocr()
	if err != nil {
		return Reading{}, err
	}
	f, err := v.Shot(ctx)
	if err != nil {
		return Reading{}, err
	}
	return v.readFrame(ctx, r, f)
}

func (v *VM) readFrame(ctx context.Context, r TextReader, f Frame) (Reading, error) {
	p, err := r.Read(ctx, f.Image)
	if errors.Is(err, backends.ErrOCRUnavailable) {
		return Reading{}, &Error{Message: err.Error(), Hint: "install what it names (tools/deps.sh does), or read the screen with ui_screenshot", Err: err}
	}
	if err != nil {
		return Reading{}, wrap(err, "", "vmid %d OCR", v.info.VMID)
	}
	return Reading{Frame: f, Page: p}, nil
}

// Seeing is a vision model's element list for one frame.
type Seeing struct {
	Frame    Frame
	Elements []backends.Element // in full-frame pixels
	Cached   bool
	Took     time.Duration // the model call (0 from the cache)
	Complete bool          // false: the model was cut off or unparseable
	Problem  string
	Region   *Window // the window the list was made for, when region= was given
}

// visionModel answers the vision client or the refusal.
func (v *VM) visionModel() (ElementModel, error) {
	e := v.eyes()
	if e == nil || e.Vision == nil {
		return nil, Failf("set [vision] api and a key in the config (or PV_AI_API and PV_AI_KEY)", "no vision model is configured")
	}
	return e.Vision, nil
}

// See lists the UI elements on the frame f (taken by the caller). With a
// window, only that window is sent and the list is not cached: its
// coordinates answer another question.
func (v *VM) See(ctx context.Context, f Frame, region *Window) (Seeing, error) {
	m, err := v.visionModel()
	if err != nil {
		return Seeing{}, err
	}
	s := Seeing{Frame: f, Region: region}
	if region != nil {
		box := region.Box.Intersect(f.Image.Bounds())
		if box.Empty() {
			return Seeing{}, Failf("take the full frame instead", "window %s (%q) is off screen", region.ID, region.Title)
		}
		list, err := m.ListElements(ctx, f.Image.SubImage(box).(*image.RGBA))
		if err != nil {
			return Seeing{}, modelError(err)
		}
		s.Elements, s.Took, s.Complete, s.Problem = list.Elements, list.Took, list.Complete, list.Problem
		return s, nil
	}
	key := elementKey(m, f)
	list, cached, err := v.eyes().elements.get(ctx, key, func() (backends.ElementList, error) { return m.ListElements(ctx, f.Image) })
	if err != nil {
		return Seeing{}, modelError(err)
	}
	s.Elements, s.Cached, s.Complete, s.Problem = list.Elements, cached, list.Complete, list.Problem
	if !cached {
		s.Took = list.Took
	}
	return s, nil
}

// cachedElements answers the frame's element list if the cache has it,
// without calling the model.
func (v *VM) cachedElements(f Frame) ([]backends.Element, bool) {
	e := v.eyes()
	if e == nil || e.Vision == nil {
		return nil, false
	}
	key := elementKey(e.Vision, f)
	e.elements.mu.Lock()
	en, ok := e.elements.entries[key]
	e.elements.mu.Unlock()
	if !ok {
		return nil, false
	}
	select {
	case <-en.done:
		return en.list.Elements, en.err == nil && en.list.Complete
	default:
		return nil, false
	}
}

// elementKey names a frame's list: its pixels and the pipeline that made
// it (model, prompt, the size sent), which is the same for every caller.
func elementKey(m ElementModel, f Frame) string {
	b := f.Image.Bounds()
	return m.ListKey(b.Dx(), b.Dy()) + "|" + f.Digest()
}

// modelError keeps a model client's message and hint.
func modelError(err error) error {
	return wrap(err, "the model endpoint may be down or overloaded: try again, or read the screen with ui_read", "")
}

// Kinds are the element types a label lookup may be narrowed to.
var Kinds = []string{"button", "link", "field", "checkbox", "radio", "tab", "menu", "menuitem", "list item", "icon", "text", "window", "other"}

// CheckKind refuses a kind no element has.
func CheckKind(kind string) error {
	if kind == "" {
		return nil
	}
	for _, k := range Kinds {
		if kind == k {
			return nil
		}
	}
	return Failf("kind is one of: "+strings.Join(Kinds, ", "), "unknown kind %q", kind)
}

// ocrCandidates are the pieces of text a label may name on a page: each
// line, and each run of consecutive words in it.
func ocrCandidates(p backends.TextPage, words int) []candidate {
	var out []candidate
	for _, l := range p.Lines {
		out = append(out, candidate{Spot: Spot{Box: l.Box, Text: l.Text, Selected: l.Selected}, folded: foldLabel(l.Text)})
		for i := range l.Words {
			for n := 1; n <= words+1 && i+n <= len(l.Words); n++ {
				if i == 0 && n == len(l.Words) {
					continue // the line itself
				}
				run := l.Words[i : i+n]
				var box image.Rectangle
				var texts []string
				for _, w := range run {
					box = box.Union(w.Box)
					texts = append(texts, w.Text)
				}
				t := strings.Join(texts, " ")
				out = append(out, candidate{Spot: Spot{Box: box, Text: t, Selected: l.Selected}, folded: foldLabel(t)})
			}
		}
	}
	return out
}

// FindText looks for label in what OCR read; nil when it is not there, an
// error when it is in several places equally.
func FindText(p backends.TextPage, label string) (*Spot, error) {
	spots := bestSpots(label, ocrCandidates(p, len(strings.Fields(label))))
	switch len(spots) {
	case 0:
		return nil, nil
	case 1:
		return &spots[0], nil
	}
	return nil, ambiguous(label, "OCR", spots)
}

// CheckText reads the screen once and answers where label is, or nil.
func (v *VM) CheckText(ctx context.Context, label string) (*Spot, Reading, error) {
	if err := CheckLabel(label); err != nil {
		return nil, Reading{}, err
	}
	rd, err := v.Read(ctx)
	if err != nil {
		return nil, Reading{}, err
	}
	s, err := FindText(rd.Page, label)
	return s, rd, err
}

// TextWait is the outcome of WaitText.
type TextWait struct {
	Spot    *Spot // nil on timeout
	Elapsed time.Duration
	Reading Reading // the last reading
}

// WaitText reads the screen until label shows or timeout passes. A frame
// is read only when it differs from the last one read, and then only its
// changed lines cost recognition.
func (v *VM) WaitText(ctx context.Context, label string, timeout time.Duration) (TextWait, error) {
	if err := CheckLabel(label); err != nil {
		return TextWait{}, err
	}
	r, err := v.ocr()
	if err != nil {
		return TextWait{}, err
	}
	timeout = v.c.clampWait(timeout)
	start := time.Now()
	deadline := start.Add(timeout)
	var last Reading
	for i := 0; ; i++ {
		// The first and the last look ask the console; the ones between
		// read the live frame, which may lag the screen but is cheap.
		final := !time.Now().Before(deadline)
		look := v.peek
		if i == 0 || final {
			look = v.Shot
		}
		f, err := look(ctx)
		if err != nil {
			return TextWait{}, err
		}
		if last.Frame.Image == nil || significantChange(last.Frame.Image, f.Image) {
			if last, err = v.readFrame(ctx, r, f); err != nil {
				return TextWait{}, err
			}
			s, err := FindText(last.Page, label)
			if err != nil || s != nil {
				return TextWait{Spot: s, Elapsed: time.Since(start), Reading: last}, err
			}
		}
		if final {
			return TextWait{Elapsed: time.Since(start), Reading: last}, nil
		}
		select {
		case <-ctx.Done():
			return TextWait{}, ctx.Err()
		case <-time.After(min(4*sampleEvery, time.Until(deadline))):
		}
	}
}

// LabelClick is where ClickLabel clicked and how it found the spot.
type LabelClick struct {
	Source string // ocr | elements | grounding
	Point  image.Point
	Spot   Spot
	Frame  Frame // the frame it aimed on
}

// topBand is the strip where a grounding model's point is refused: asked
// for a label that is not there, such models still answer a point, and
// typically one in the top bar (vision.md; the manual).
const topBand = 30

// ClickLabel clicks the element labelled label: OCR first (fast, exact
// boxes), then the vision model's list of the same frame if the cache has
// it, then the grounding model. With since (a frame digest), it refuses
// when the screen changed around the target since that frame.
func (v *VM) ClickLabel(ctx context.Context, label, kind, button string, count int, since string) (LabelClick, error) {
	return v.ClickLabelNoted(ctx, label, kind, button, count, since, nil)
}

// ClickLabelNoted is ClickLabel whose frame, with the point found on it,
// is captured for the training dataset before the click (note nil: not).
func (v *VM) ClickLabelNoted(ctx context.Context, label, kind, button string, count int, since string, note *ShotNote) (LabelClick, error) {
	if err := CheckLabel(label); err != nil {
		return LabelClick{}, err
	}
	if err := CheckKind(kind); err != nil {
		return LabelClick{}, err
	}
	if _, err := ParseButton(button); err != nil {
		return LabelClick{}, err
	}
	f, err := v.Shot(ctx)
	if err != nil {
		return LabelClick{}, err
	}
	lc, err := v.locate(ctx, f, label, kind)
	if err != nil {
		return LabelClick{}, err
	}
	lc.Frame = f
	var aimed *Aimed
	if note != nil {
		n := *note
		n.Click, n.ClickSource, n.Label = &lc.Point, lc.Source, label
		aimed = v.CaptureAim(ctx, &f, n)
	}
	err = v.Click(ctx, lc.Point.X, lc.Point.Y, button, count, since)
	aimed.Finish(ctx, err == nil)
	if err != nil {
		return LabelClick{}, err
	}
	return lc, nil
}

// locate finds label on frame f, in the order ClickLabel documents.
func (v *VM) locate(ctx context.Context, f Frame, label, kind string) (LabelClick, error) {
	e := v.eyes()
	if e == nil {
		return LabelClick{}, Failf("set up [ocr] or [vision] in the config", "this server cannot read the screen")
	}
	// Icons have no text for OCR to read.
	if e.OCR != nil && kind != "icon" {
		rd, err := v.readFrame(ctx, e.OCR, f)
		if err != nil && (e.Vision == nil || !errors.Is(err, backends.ErrOCRUnavailable)) {
			return LabelClick{}, err
		}
		if err == nil {
			s, err := FindText(rd.Page, label)
			if err != nil {
				return LabelClick{}, err
			}
			if s != nil {
				return LabelClick{Source: "ocr", Point: s.Centre(), Spot: *s}, nil
			}
		}
	}
	if els, ok := v.cachedElements(f); ok {
		var cands []candidate
		for _, el := range els {
			if kind != "" && el.Type != kind {
				continue
			}
			box := image.Rectangle{Min: image.Pt(el.X, el.Y), Max: image.Pt(el.X+1, el.Y+1)}
			cands = append(cands, candidate{Spot: Spot{Box: box, Text: el.Label, Kind: el.Type}, folded: foldLabel(el.Label)})
		}
		spots := bestSpots(label, cands)
		if len(spots) > 1 {
			return LabelClick{}, ambiguous(label, "the vision model's element list", spots)
		}
		if len(spots) == 1 {
			return LabelClick{Source: "elements", Point: spots[0].Centre(), Spot: spots[0]}, nil
		}
	}
	g := e.Grounding
	if g == nil {
		g = e.Vision
	}
	if g == nil {
		return LabelClick{}, Failf("check the spelling against ui_read's lines; without a grounding model ([grounding] or [vision] in the config) only text OCR reads can be clicked by label",
			"label %q is not on the screen", label)
	}
	p, err := g.Point(ctx, f.Image, label, kind)
	if err != nil {
		if errors.Is(err, backends.ErrNoPoint) {
			return LabelClick{}, Failf("check the label against ui_read or ui_see", "label %q is not on the screen (the grounding model gave no point)", label)
		}
		return LabelClick{}, modelError(err)
	}
	if p.Y < topBand {
		return LabelClick{}, Failf("check the label against ui_read or ui_see; a point in the top bar is what grounding models answer for a label that is not there",
			"label %q is not on the screen (the grounding model pointed into the top %d px, at %d,%d)", label, topBand, p.X, p.Y)
	}
	return LabelClick{Source: "grounding", Point: p, Spot: Spot{Box: image.Rectangle{Min: p, Max: p.Add(image.Pt(1, 1))}, Text: label, Kind: kind}}, nil
}

// ElementLines renders an element list as the manual's TSV: x, y, type,
// label; "elements: 0" when there is none.
func ElementLines(els []backends.Element) string {
	if len(els) == 0 {
		return "elements: 0"
	}
	var b strings.Builder
	b.WriteString("x\ty\ttype\tlabel")
	for _, el := range els {
		fmt.Fprintf(&b, "\n%d\t%d\t%s\t%s", el.X, el.Y, el.Type, tsvField(el.Label))
	}
	return b.String()
}

// tsvField keeps a field on its line and in its column.
func tsvField(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}
