package ocr

import (
	"context"
	"image"
	"image/draw"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

func readFrame(t *testing.T, r *Reader, img *image.RGBA) Page {
	t.Helper()
	p, err := r.Read(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func texts(p Page) []string {
	var out []string
	for _, l := range p.Lines {
		out = append(out, l.Text)
	}
	return out
}

// The VGA console is read from the seed alone: no piece goes to
// tesseract, and the text is exact.
func TestSeedReadsTheVGAConsoleWithoutTesseract(t *testing.T) {
	r := reader(t)
	p := readFrame(t, r, loadPNG(t, filepath.Join(corpusDir, "tiny-dmesg", "frame.png")))
	if p.Read != 0 || p.Grid == 0 {
		t.Errorf("read %d pieces by tesseract, %d from the atlas; want 0 and all", p.Read, p.Grid)
	}
	if got := strings.Join(texts(p), "\n"); !strings.Contains(got, "x86/mm: Checked W+X mappings: passed, no W+X pages found.") {
		t.Errorf("read:\n%s", got)
	}
}

// unseenFont draws lines in basicfont's 7x13 (X11's misc-fixed 7x13, a
// size no template uses and the atlas has never seen), black on white.
func unseenFont(lines ...string) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, 640, 40+20*len(lines)))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	d := font.Drawer{Dst: img, Src: image.Black, Face: basicfont.Face7x13}
	for i, l := range lines {
		d.Dot = fixed.P(20, 30+20*i)
		d.DrawString(l)
	}
	return img
}

// A font the atlas has never seen reads as plain tesseract reads it: the
// atlas answers no cell it has not seen with certainty.
func TestUnseenFontReadsAsPlainTesseract(t *testing.T) {
	img := unseenFont("Press Next to continue or Cancel to quit.", "Disk usage is 42 percent of 8 GiB.", "Select the keyboard layout for this computer.")
	with := reader(t)
	plain := reader(t)
	plainTesseract(plain)
	a, b := readFrame(t, with, img), readFrame(t, plain, img)
	if a.Grid != 0 {
		t.Errorf("%d pieces read from the atlas in a font it does not know", a.Grid)
	}
	if !slices.Equal(texts(a), texts(b)) {
		t.Errorf("with the atlas: %q\nplain tesseract: %q", texts(a), texts(b))
	}
}

// seedWithout answers an atlas of the seed less the glyphs of chars.
func seedWithout(chars string) *atlas {
	a := newAtlas("", 1000)
	for k, c := range a.known {
		if slices.ContainsFunc(c.chars, func(r rune) bool { return strings.ContainsRune(chars, r) }) {
			delete(a.known, k)
		}
	}
	return a
}

// A glyph the seed lacks is read by tesseract and learned: once two reads
// agree on it, the atlas answers it, and the line it is in no longer goes
// to tesseract.
func TestAGlyphIsLearnedFromTwoReads(t *testing.T) {
	r := reader(t)
	r.atlas = seedWithout("k")
	shell := loadPNG(t, filepath.Join(corpusDir, "tiny-shell", "frame.png"))
	if p := readFrame(t, r, shell); p.Read != 0 {
		t.Fatalf("tiny-shell has no k, yet %d pieces went to tesseract", p.Read)
	}
	// dmesg has k in several words ("clocksource", "kernel"): each is a
	// read of the k cell.
	p := readFrame(t, r, loadPNG(t, filepath.Join(corpusDir, "tiny-dmesg", "frame.png")))
	if p.Read == 0 {
		t.Fatal("dmesg's k went to no tesseract read")
	}
	_, learned, confirmed, _ := r.atlas.stats()
	if confirmed == 0 {
		t.Fatalf("nothing confirmed after reading dmesg (%d cells learned)", learned)
	}
	// The boot log has k too: the atlas answers it now.
	p = readFrame(t, r, loadPNG(t, filepath.Join(corpusDir, "tiny-bootlog", "frame.png")))
	if p.Read != 0 {
		t.Errorf("after learning k, %d pieces still went to tesseract", p.Read)
	}
	if got := strings.Join(texts(p), "\n"); !strings.Contains(got, "0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org) (gc") {
		t.Errorf("read:\n%s", got)
	}
}

// keyOf answers the atlas key of the first cell of the text on a VGA
// frame at cell (row, col).
func vgaKey(t *testing.T, img *image.RGBA, row, col int) uint64 {
	t.Helper()
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	px := rgb(img)
	gr := newGridReader(newAtlas("", 10), px, inkMask(px, w, h), w, h)
	for _, g := range groups(px, w, h, blobs(gr.ink, w, h)) {
		if !g.Overlaps(image.Rect(col*9, row*16, col*9+9, row*16+16)) {
			continue
		}
		rd, ok := gr.read(g)
		if !ok {
			t.Fatalf("the group at %v does not read", g)
		}
		return rd.cells[(col*9-rd.x0)/9].key
	}
	t.Fatalf("no group at row %d col %d", row, col)
	return 0
}

// A wrong character learned once is not answered; learned twice it is
// (that is what two confirmations mean); once reads disagree, the cell
// is answered only when three times as many said one character.
func TestAPoisonedCellIsNotAnswered(t *testing.T) {
	shell := loadPNG(t, filepath.Join(corpusDir, "tiny-shell", "frame.png"))
	// Row 6 is "hello from poligon": its first cell is h.
	k := vgaKey(t, shell, 6, 0)
	r := reader(t)
	r.atlas = seedWithout("h")
	poison := []observation{{key: k, char: 'X', cw: 9, left: 0}}
	r.atlas.learn(poison)
	if _, ok := r.atlas.lookup(k); ok {
		t.Fatal("a cell learned once is answered")
	}
	got := texts(readFrame(t, r, shell))
	if !slices.Contains(got, "hello from poligon") {
		t.Errorf("with a cell poisoned once, the frame reads %q", got)
	}

	a := seedWithout("h")
	a.learn(poison)
	a.learn(poison)
	if c, ok := a.lookup(k); !ok || string(c.chars) != "X" {
		t.Fatalf("a cell two reads agreed on: %q, %v", string(c.chars), ok)
	}
	// Reads that disagree: h against X's two; h takes over at its third,
	// and is answered at its sixth (three times X's two).
	for i, want := range []bool{false, false, false, false, false, true} {
		a.learn([]observation{{key: k, char: 'h', cw: 9, left: 0}})
		c, ok := a.lookup(k)
		if ok != want || ok && string(c.chars) != "h" {
			t.Errorf("after %d reads of h against 2 of X: answered %q, %v; want %v", i+1, string(c.chars), ok, want)
		}
	}
}

// The learned cells survive a restart in the atlas file; a file that is
// not one is reported and replaced, never trusted.
func TestAtlasFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ocr", "atlas")
	a := newAtlas(file, 100)
	obs := []observation{{key: 42, char: 'ж', cw: 7, left: 1}}
	a.learn(obs)
	a.learn(obs)
	if err := a.save(); err != nil {
		t.Fatal(err)
	}
	b := newAtlas(file, 100)
	if c, ok := b.lookup(42); !ok || string(c.chars) != "ж" || b.loadErr != nil {
		t.Fatalf("after a restart: %q, %v (%v)", string(c.chars), ok, b.loadErr)
	}
	if !slices.ContainsFunc(b.faces(), func(f face) bool { return f.cw == 7 && f.lefts&2 != 0 }) {
		t.Errorf("the learned cell's face is not tried: %+v", b.faces())
	}
	if err := os.WriteFile(file, []byte("not an atlas"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newAtlas(file, 100)
	if c.loadErr == nil || !strings.Contains(c.loadErr.Error(), "not an atlas file") {
		t.Errorf("a damaged file: %v", c.loadErr)
	}
	if _, ok := c.lookup(42); ok {
		t.Error("a damaged file's cell is answered")
	}
}

// Learning is bounded: cells not yet answered make way for new ones, and
// answered cells stay.
func TestAtlasIsBounded(t *testing.T) {
	a := newAtlas("", 8)
	sure := observation{key: 1, char: 'a', cw: 6}
	a.learn([]observation{sure})
	a.learn([]observation{sure})
	for k := uint64(100); k < 200; k++ {
		a.learn([]observation{{key: k, char: 'b', cw: 6}})
	}
	if _, learned, _, _ := a.stats(); learned > 8 {
		t.Errorf("%d cells learned, limit 8", learned)
	}
	if _, ok := a.lookup(1); !ok {
		t.Error("an answered cell was dropped to make room")
	}
}
