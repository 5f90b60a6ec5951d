package ocr

import (
	"image"
	"image/draw"
	"slices"
	"testing"
)

// erase answers img with line l's middle word painted over in the colour
// left of it, as an agent's frame after a word was deleted.
func erase(img *image.RGBA, l Line) (*image.RGBA, Word) {
	w := l.Words[len(l.Words)/2]
	changed := image.NewRGBA(img.Bounds())
	copy(changed.Pix, img.Pix)
	draw.Draw(changed, w.Box, image.NewUniform(img.At(max(w.Box.Min.X-1, 0), w.Box.Min.Y)), image.Point{}, draw.Src)
	return changed, w
}

// A frame laid out after one like it (a word erased) has the groups a
// layout of the whole frame finds: those of the band laid out again, and
// those kept.
func TestAChangedFrameIsLaidOutAsAWhole(t *testing.T) {
	r := reader(t)
	for _, c := range loadCorpus(t) {
		t.Run(c.name, func(t *testing.T) {
			img := loadPNG(t, c.frame)
			r.forget()
			first := readFrame(t, r, img)
			for i, l := range first.Lines {
				if i%3 != 0 || !slices.ContainsFunc(c.regions, func(r region) bool { return l.Centre().In(r.box) }) {
					continue // text put there, not a wallpaper's strokes
				}
				changed, w := erase(img, l)
				m, fresh := r.frames.take(img)
				if fresh {
					t.Fatal("the frame just read is not remembered")
				}
				kept, again := m.relayout(changed)
				got := again
				for _, k := range kept {
					got = append(got, k.box)
				}
				whole := (&frameMemo{w: m.w, h: m.h}).layout(changed)
				sortBoxes(got)
				sortBoxes(whole)
				if !slices.Equal(got, whole) {
					t.Errorf("%q erased: %d groups kept, %d laid out again; they differ from the whole layout's %d:\n%v\n%v", w.Text, len(kept), len(again), len(whole), got, whole)
				}
				if len(kept) == 0 {
					t.Errorf("%q erased: nothing kept", w.Text)
				}
				// Read it (the memo was taken: a fresh one for the frame).
				m.results = nil
				readFrame(t, r, img)
			}
		})
	}
}

func sortBoxes(bs []image.Rectangle) {
	slices.SortFunc(bs, func(a, b image.Rectangle) int {
		if a.Min.Y != b.Min.Y {
			return a.Min.Y - b.Min.Y
		}
		return a.Min.X - b.Min.X
	})
}

// The VGA console with a word erased reads, after the frame before, as it
// reads cold; and the frame before reads again as before.
func TestAChangedFrameReadsAsACold(t *testing.T) {
	r := reader(t)
	img := loadPNG(t, corpusDir+"/tiny-dmesg/frame.png")
	first := readFrame(t, r, img)
	cold := reader(t)
	for i, l := range first.Lines {
		changed, w := erase(img, l)
		warm := readFrame(t, r, changed)
		if warm.Cached == 0 {
			t.Errorf("line %d changed: nothing kept from the frame before", i)
		}
		cold.forget()
		if want := readFrame(t, cold, changed); !slices.Equal(texts(warm), texts(want)) {
			t.Errorf("%q erased: read after the frame before:\n%q\nread cold:\n%q", w.Text, texts(warm), texts(want))
		}
		if got := texts(readFrame(t, r, img)); !slices.Equal(got, texts(first)) {
			t.Errorf("the frame again after %q was erased:\n%q\nwant\n%q", w.Text, got, texts(first))
		}
	}
}
