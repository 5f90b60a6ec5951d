package dataset_test

import (
	"bytes"
	"image"
	"image/jpeg"
	"testing"

	"golang.org/x/image/draw"

	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/dataset/datasettest"
)

func scaled(src image.Image, w, h int, k draw.Interpolator) *image.RGBA {
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	k.Scale(dst, dst.Bounds(), src, src.Bounds(), draw.Src, nil)
	return dst
}

// A frame matches itself at half scale (as ui_screenshot scale=0.5 saves
// it: ApproxBiLinear, and other kernels), as a JPEG, and no other screen.
func TestFingerprintSameScreen(t *testing.T) {
	for seed := int64(0); seed < 3; seed++ {
		full := datasettest.Draw(seed, 1280, 800).Image
		fp := dataset.FingerprintOf(full)
		for name, img := range map[string]image.Image{
			"approx-bilinear 0.5": scaled(full, 640, 400, draw.ApproxBiLinear),
			"catmull-rom 0.5":     scaled(full, 640, 400, draw.CatmullRom),
			"nearest 0.5":         scaled(full, 640, 400, draw.NearestNeighbor),
			"jpeg q80":            jpegRoundTrip(t, full, 80),
			"jpeg q80 at 0.5":     jpegRoundTrip(t, scaled(full, 640, 400, draw.ApproxBiLinear), 80),
		} {
			if !fp.Matches(dataset.FingerprintOf(img)) {
				t.Errorf("seed %d: %s does not match its full-size frame", seed, name)
			}
		}
	}
	var prints []*dataset.Fingerprint
	for seed := int64(0); seed < 40; seed++ {
		prints = append(prints, dataset.FingerprintOf(datasettest.Draw(seed, 640, 400).Image))
	}
	for a := range prints {
		for b := a + 1; b < len(prints); b++ {
			if prints[a].Matches(prints[b]) {
				t.Errorf("screens %d and %d match", a, b)
			}
		}
	}
}

// Both tests must hold: a brightness shift keeps the average hash (every
// cell moves with the mean) but not the thumbnail; a dialog drawn over a
// part of the screen keeps the mean grey but not the hash.
func TestFingerprintNeedsBoth(t *testing.T) {
	base := datasettest.Draw(3, 1280, 800).Image
	fp := dataset.FingerprintOf(base)
	brighter := image.NewRGBA(base.Bounds())
	for i, v := range base.Pix {
		brighter.Pix[i] = v
		if i%4 != 3 {
			brighter.Pix[i] = uint8(min(255, int(v)+12))
		}
	}
	if fp.Matches(dataset.FingerprintOf(brighter)) {
		t.Error("a screen 12 grey levels brighter matches")
	}
	dialog := image.NewRGBA(base.Bounds())
	copy(dialog.Pix, base.Pix)
	draw.Draw(dialog, image.Rect(300, 200, 980, 600), image.White, image.Point{}, draw.Src)
	if fp.Matches(dataset.FingerprintOf(dialog)) {
		t.Error("a screen with a dialog over it matches")
	}
}

func jpegRoundTrip(t *testing.T, img image.Image, q int) image.Image {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	out, err := jpeg.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
