// Package datasettest makes synthetic captures for the dataset package's
// tests and benchmarks: drawn screens (windows, toolbars, lists, forms)
// with the AT-SPI dump and OCR words that describe them, written through
// the real dataset.Writer.
package datasettest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"time"

	"github.com/poligon/poligon/internal/dataset"
)

// Screen is a drawn frame and what is on it.
type Screen struct {
	Image   *image.RGBA
	Widgets []dataset.Widget
	Words   []dataset.Word
	Hard    bool // it has a toolbar and a list
}

// Draw draws the screen of a seed: each seed its own layout and colours,
// so two seeds never look like the same screen; even seeds show a toolbar
// and a list (a hard screen), odd ones a form.
func Draw(seed int64, w, h int) *Screen {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	s := &Screen{Image: image.NewRGBA(image.Rect(0, 0, w, h)), Hard: seed%2 == 0}
	grey := func(lo, hi int) color.RGBA {
		v := uint8(lo + rng.IntN(hi-lo))
		return color.RGBA{v, uint8(int(v) * 9 / 10), uint8(min(255, int(v)*11/10)), 255}
	}
	wallpaper(s.Image, grey(20, 120), rng)
	// A window somewhere, a darker title bar, then its contents.
	win := image.Rect(rng.IntN(w/3), rng.IntN(h/4), 0, 0)
	win.Max = image.Pt(win.Min.X+w/2+rng.IntN(w/2-win.Min.X), win.Min.Y+h/2+rng.IntN(h/2-win.Min.Y))
	s.add("frame", fmt.Sprintf("Window %d", seed), win, grey(170, 250))
	s.add("label", "Title", image.Rect(win.Min.X, win.Min.Y, win.Max.X, win.Min.Y+28), grey(60, 110))
	x, y := win.Min.X+8, win.Min.Y+36
	if s.Hard {
		bar := image.Rect(win.Min.X, y, win.Max.X, y+34)
		s.add("tool bar", "", bar, grey(130, 160))
		for i := range 6 {
			s.add("push button", fmt.Sprintf("Tool%d", i), image.Rect(x+i*48, y+3, x+i*48+42, y+31), grey(0, 255))
		}
		y += 42
		list := image.Rect(win.Min.X+8, y, win.Max.X-8, min(win.Max.Y-8, y+10*24))
		s.add("list", "", list, grey(200, 255))
		for i := 0; list.Min.Y+(i+1)*24 <= list.Max.Y; i++ {
			row := image.Rect(list.Min.X, list.Min.Y+i*24, list.Max.X, list.Min.Y+(i+1)*24)
			s.add("list item", fmt.Sprintf("row %d-%d", seed, i), row, grey(0, 255))
		}
	} else {
		for i := range 3 {
			s.add("label", fmt.Sprintf("Field%d", i), image.Rect(x, y+i*40, x+120, y+i*40+24), grey(150, 200))
			s.add("text", "", image.Rect(x+130, y+i*40, x+400, y+i*40+24), grey(230, 255))
		}
		s.add("push button", "OK", image.Rect(win.Max.X-200, win.Max.Y-44, win.Max.X-110, win.Max.Y-12), grey(0, 255))
		s.add("push button", "Cancel", image.Rect(win.Max.X-100, win.Max.Y-44, win.Max.X-10, win.Max.Y-12), grey(0, 255))
	}
	// A second window over part of the first.
	other := image.Rect(rng.IntN(w*2/3), rng.IntN(h*2/3), 0, 0)
	other.Max = image.Pt(min(w, other.Min.X+w/4+rng.IntN(w/4)), min(h, other.Min.Y+h/4+rng.IntN(h/4)))
	s.add("dialog", fmt.Sprintf("Dialog %d", seed), other, grey(0, 255))
	return s
}

// add draws a widget's box and records it; a named one gets strokes of
// text drawn in it (so frames weigh and decode like real ones) and is
// an OCR word.
func (s *Screen) add(role, name string, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(s.Image.Bounds())
	fill(s.Image, r, c)
	if name != "" && r.Dy() >= 12 {
		ink := color.RGBA{255 - c.R, 255 - c.G, 255 - c.B, 255}
		y := r.Min.Y + (r.Dy()-9)/2
		for x, i := r.Min.X+4, 0; x+2 < r.Max.X-4; i++ {
			h := 5 + int(name[i%len(name)])%5 // a glyph's height from the name's letters
			fill(s.Image, image.Rect(x, y+9-h, x+1+i%2, y+9), ink)
			x += 3 + int(name[i%len(name)])%3
		}
	}
	s.Widgets = append(s.Widgets, dataset.Widget{App: "synthetic", Role: role, Name: name,
		X: r.Min.X, Y: r.Min.Y, W: r.Dx(), H: r.Dy(), States: []string{"showing", "visible"}, Depth: 2})
	if name != "" {
		s.Words = append(s.Words, dataset.Word{Box: r, Text: name, Conf: 91.5})
	}
}

// wallpaper paints a desktop background: a gradient from base with a
// little grain, as a photo wallpaper has, so a frame weighs and decodes
// like a real one (a 1280x800 XFCE screenshot is about 300 KB).
func wallpaper(img *image.RGBA, base color.RGBA, rng *rand.Rand) {
	b := img.Bounds()
	var bits uint64
	for y := b.Min.Y; y < b.Max.Y; y++ {
		p := img.Pix[img.PixOffset(b.Min.X, y):img.PixOffset(b.Max.X, y)]
		for x := 0; x < b.Dx(); x++ {
			if x%32 == 0 {
				bits = rng.Uint64()
			}
			grain := int(bits & 3)
			bits >>= 2
			p[4*x] = uint8(min(255, int(base.R)+x*40/b.Dx()+grain))
			p[4*x+1] = uint8(min(255, int(base.G)+y*40/b.Dy()+grain))
			p[4*x+2] = uint8(min(255, int(base.B)+grain))
			p[4*x+3] = 255
		}
	}
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		p := img.Pix[img.PixOffset(r.Min.X, y):img.PixOffset(r.Max.X, y)]
		for i := 0; i < len(p); i += 4 {
			p[i], p[i+1], p[i+2], p[i+3] = c.R, c.G, c.B, c.A
		}
	}
}

// PNG encodes an image fast. It panics on an image PNG cannot hold (none
// of Draw's).
func PNG(img image.Image) []byte {
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// DumpJSON is the dump the guest script would print for a screen.
func DumpJSON(s *Screen, locale string) []byte {
	b := s.Image.Bounds()
	d := dataset.Dump{Screen: [2]int{b.Dx(), b.Dy()}, Locale: locale, Desktop: "XFCE", SessionType: "x11", Widgets: s.Widgets}
	out, err := json.Marshal(d)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return out
}

// Spec shapes a synthetic capture.
type Spec struct {
	Sessions        int
	ShotsPerSession int
	W, H            int
	// Distinct is how many different screens are drawn (shots reuse them
	// in turn, each under its own seed's name); 0: every shot its own.
	Distinct int
}

// Written is a synthetic capture: its directory, the index lines written
// and the seed of each shot's screen.
type Written struct {
	Dir   string
	Lines []dataset.Line
	Seeds []int64
}

// Capture writes a synthetic capture into dir through dataset.Writer:
// sessions on vm 100, 101, ...; every third shot a click with an intent,
// locales ru and en, themes light and dark, two apps.
func Capture(dir string, spec Spec) (*Written, error) {
	w, err := dataset.NewWriter(dir, 0)
	if err != nil {
		return nil, err
	}
	out := &Written{Dir: dir}
	pngs := map[int64][]byte{}
	screens := map[int64]*Screen{}
	day := time.Date(2026, 9, 19, 12, 0, 0, 0, time.UTC)
	for s := range spec.Sessions {
		session := dataset.SessionName(dataset.BackendID("qemu:///local"), "default", 100+s, "user", day)
		for i := range spec.ShotsPerSession {
			seed := int64(s*spec.ShotsPerSession + i)
			if spec.Distinct > 0 {
				seed %= int64(spec.Distinct)
			}
			scr, ok := screens[seed]
			if !ok {
				scr = Draw(seed, spec.W, spec.H)
				screens[seed], pngs[seed] = scr, PNG(scr.Image)
			}
			locale := []string{"ru_RU.UTF-8", "en_US.UTF-8"}[s%2]
			line := dataset.Line{App: []string{"poligon-form", "workbench"}[i%2], Theme: []string{"light", "dark"}[s/2%2],
				Bench: "default", Origin: "ui_screenshot", Req: fmt.Sprintf("r%d-%d", s, i), VMID: 100 + s, Node: "local", Mode: "ok"}
			if i%3 == 0 {
				c := scr.Widgets[len(scr.Widgets)-1]
				line.Click = &[2]int{c.X + c.W/2, c.Y + c.H/2}
				line.ClickSource, line.Origin, line.Intent = "xy", "ui_click", "press "+c.Name
			}
			l, err := w.Write(dataset.Shot{Session: session, Agent: "user", PNG: pngs[seed],
				ATSPI: DumpJSON(scr, locale), OCR: scr.Words, Line: line})
			if err != nil {
				return nil, err
			}
			out.Lines = append(out.Lines, l)
			out.Seeds = append(out.Seeds, seed)
		}
	}
	return out, nil
}

// ShotFile names a benchmark frame file after its seed.
func ShotFile(seed int64) string { return fmt.Sprintf("eval-shot-%04d.png", seed) }
