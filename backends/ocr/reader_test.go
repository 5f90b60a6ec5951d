package ocr

import (
	"context"
	"errors"
	"image"
	"image/draw"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/poligon/poligon/backends/ocr/internal/tess"
	"github.com/poligon/poligon/internal/testvm"
)

// testdata/screens.png is tiny-x's xterms drawn by Xvfb (render.sh): the
// same X fonts, no VM needed. The engine tests read tiny-x itself.

func loadPNG(t testing.TB, path string) *image.RGBA { return testvm.LoadPNG(t, path) }

// reader answers a reader for the tests; OCR must work here (make deps).
func reader(t testing.TB) *Reader {
	t.Helper()
	r := New(Config{})
	if err := r.Check(); err != nil {
		if _, noCgo := tess.Version(); noCgo != nil && strings.Contains(noCgo.Error(), "without cgo") {
			t.Skip(noCgo)
		}
		t.Fatalf("OCR must work for these tests (tools/deps.sh installs it): %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// words answers the words of a text file, without the punctuation around
// them (a 6x13 period reads as a comma as often as not).
func words(t testing.TB, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range strings.Fields(string(b)) {
		if w = bare(w); w != "" {
			out = append(out, w)
		}
	}
	return out
}

func bare(w string) string { return strings.TrimFunc(w, unicode.IsPunct) }

// recall answers the share of want found among the page's words.
func recall(p Page, want []string) (float64, []string) {
	got := map[string]int{}
	for _, l := range p.Lines {
		for _, w := range l.Words {
			got[bare(w.Text)]++
		}
	}
	hit := 0
	var missed []string
	for _, w := range want {
		if got[w] > 0 {
			hit++
		} else {
			missed = append(missed, w)
		}
	}
	return float64(hit) / float64(len(want)), missed
}

func TestReadsEnglishAndRussian(t *testing.T) {
	r := reader(t)
	p, err := r.Read(context.Background(), loadPNG(t, "testdata/screens.png"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"en", "ru"} {
		got, missed := recall(p, words(t, "testdata/"+lang+".txt"))
		t.Logf("%s word recall %.3f, missed %q", lang, got, missed)
		if got < 0.95 {
			t.Errorf("%s word recall %.3f, want >= 0.95 (missed %q)", lang, got, missed)
		}
	}
}

// cell answers where xterm A (at +10+10, 2 px inner border, 6x13 cells)
// draws the n characters at row, col.
func cell(row, col, n int) image.Rectangle {
	return image.Rect(12+6*col, 12+13*row, 12+6*(col+n), 12+13*(row+1))
}

func TestWordsAreWhereTheyAreDrawn(t *testing.T) {
	r := reader(t)
	p, err := r.Read(context.Background(), loadPNG(t, "testdata/screens.png"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(mustRead(t, "testdata/en.txt")), "\n")
	for _, c := range []struct {
		row  int
		word string
	}{{2, "Cancel"}, {3, "Password:"}, {3, "Domain:"}, {6, "File"}, {9, "keyboard"}} {
		col := strings.Index(lines[c.row], c.word)
		want := cell(c.row, col, len(c.word))
		found := false
		for _, l := range p.Lines {
			for _, w := range l.Words {
				if bare(w.Text) != bare(c.word) {
					continue
				}
				ctr := image.Pt((w.Box.Min.X+w.Box.Max.X)/2, (w.Box.Min.Y+w.Box.Max.Y)/2)
				if ctr.In(want.Inset(-3)) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%q: no word read inside its cells %v", c.word, want)
		}
	}
	// Word groups part at two spaces or more: "Username: test" and
	// "Password: ********" are two groups of row 3.
	var row3 []string
	for _, l := range p.Lines {
		if l.Centre().In(cell(3, 0, 80)) {
			row3 = append(row3, l.Text)
		}
	}
	if len(row3) != 3 || row3[0] != "Username: test" {
		t.Errorf("row 3 groups = %q, want Username: test | Password: ... | Domain: ...", row3)
	}
}

func mustRead(t testing.TB, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSelectedRowsAreMarked(t *testing.T) {
	r := reader(t)
	p, err := r.Read(context.Background(), loadPNG(t, "testdata/screens.png"))
	if err != nil {
		t.Fatal(err)
	}
	var sel []string
	for _, l := range p.Lines {
		// The text cursor right after the reverse-video row (xterm's
		// hollow box) is no text: it once read as a selected "1".
		if l.Selected {
			sel = append(sel, bare(l.Text))
		}
	}
	// The reverse-video row and the white-on-blue row; not the lines of the
	// dark panel (white on black for many lines) nor any black-on-white one.
	want := []string{"Selected row in reverse video", "Выбранная строка меню"}
	slices.Sort(sel)
	if strings.Join(sel, "|") != strings.Join(want, "|") {
		t.Errorf("selected = %q, want %q", sel, want)
	}
}

// plainTesseract makes r read as it did before the atlas: every piece by
// tesseract.
func plainTesseract(r *Reader) {
	r.atlas = &atlas{known: map[uint64]cellChars{}, learned: map[uint64]*learnt{}, limit: 1}
}

func TestChangedLinesOnlyAreReadAgain(t *testing.T) {
	r := reader(t)
	plainTesseract(r)
	img := loadPNG(t, "testdata/screens.png")
	cold, err := r.Read(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := r.Read(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	if warm.Read != 0 || len(warm.Lines) != len(cold.Lines) {
		t.Errorf("the same frame again: read %d pieces, %d lines (cold: %d); want all cached", warm.Read, len(warm.Lines), len(cold.Lines))
	}
	// Erase "usage" on row 4 of xterm A: "Disk" and "is 42 percent ..."
	// (long: in two halves) are new pieces, everything else is known.
	lines := strings.Split(mustRead(t, "testdata/en.txt"), "\n")
	box := cell(4, strings.Index(lines[4], "usage"), len("usage"))
	draw.Draw(img, box, image.White, image.Point{}, draw.Src)
	one, err := r.Read(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	if one.Read == 0 || one.Read > 3 {
		t.Errorf("one line changed: read %d pieces (cached %d), want 1-3", one.Read, one.Cached)
	}
	for _, l := range one.Lines {
		if l.Box.Overlaps(cell(4, 0, 80)) && strings.Contains(l.Text, "usage") {
			t.Errorf("erased word still read: %q", l.Text)
		}
	}
	if s := r.Stats(); s.Reads != 3 || s.LinesCached < int64(warm.Cached) {
		t.Errorf("stats = %+v", s)
	}
}

func TestConcurrentReads(t *testing.T) {
	r := reader(t)
	img := loadPNG(t, "testdata/screens.png")
	var wg sync.WaitGroup
	pages := make([]Page, 3)
	for i := range pages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := r.Read(context.Background(), img)
			if err != nil {
				t.Error(err)
			}
			pages[i] = p
		}()
	}
	wg.Wait()
	for i := 1; i < len(pages); i++ {
		if len(pages[i].Lines) != len(pages[0].Lines) {
			t.Errorf("read %d: %d lines, read 0: %d", i, len(pages[i].Lines), len(pages[0].Lines))
		}
	}
}

func TestCancelledRead(t *testing.T) {
	r := reader(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Read(ctx, loadPNG(t, "testdata/screens.png")); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestMissingLanguageIsOneClearError(t *testing.T) {
	r := New(Config{Languages: "eng+xxx"})
	defer r.Close()
	err := r.Available()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "tesseract-ocr-xxx") {
		t.Errorf("Available = %v, want ErrUnavailable naming tesseract-ocr-xxx", err)
	}
	_, err = r.Read(context.Background(), image.NewRGBA(image.Rect(0, 0, 8, 8)))
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Read = %v, want ErrUnavailable", err)
	}
}

// testdata/xfce-terminal.png is a corner of the debian-desktop template's
// screen (TestDebianDesktop): xfce4-terminal in DejaVu Sans Mono beside
// XFCE's wallpaper, whose strokes are ink as tall as two lines of text.
// Each terminal line reads on its own, not joined through the wallpaper
// at the window's left edge.
func TestWallpaperBesideTextStaysApart(t *testing.T) {
	r := reader(t)
	p, err := r.Read(context.Background(), loadPNG(t, "testdata/xfce-terminal.png"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range p.Lines {
		got = append(got, l.Text)
	}
	for _, want := range []string{"Alpha Bravo Charlie", "Press Next to continue", "Съешь ещё этих булок", "Нажмите Далее", "Hello from DejaVu Sans", "Привет из DejaVu Sans"} {
		if !slices.Contains(got, want) {
			t.Errorf("no line %q in %q", want, got)
		}
	}
}

// testdata/xfce/full.png is the debian-desktop template's whole screen
// (BenchmarkXFCEFrame): XFCE's wallpaper and panel, 20 lines of
// xfce4-terminal, poligon-form, and the mouse pointer's I-beam drawn over
// two lines of the terminal, joined to letters of both. Before the reader
// kept lines apart from the wallpaper's strokes and the pointer, it read
// 31% of the English words and 62% of the Russian ones.
func TestXFCEFrameIsRead(t *testing.T) {
	r := reader(t)
	p, err := r.Read(context.Background(), loadPNG(t, "testdata/xfce/full.png"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"en", "ru"} {
		// The two words under the pointer are hidden behind it.
		if got, missed := recall(p, words(t, "testdata/xfce/"+lang+".txt")); got < 0.97 {
			t.Errorf("%s: %.0f%% of the words read; missed %v", lang, 100*got, missed)
		}
	}
}
