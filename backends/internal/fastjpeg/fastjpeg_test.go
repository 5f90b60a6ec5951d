package fastjpeg

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"testing"
)

// screen is a text console's worth of pixels: light strokes on dark, JPEG
// quality 80 as uStreamer sends (Go's encoder: 4:2:0).
func screen(t testing.TB) []byte {
	img := image.NewRGBA(image.Rect(0, 0, 720, 400))
	for y := 0; y < 400; y++ {
		for x := 0; x < 720; x++ {
			c := color.RGBA{0, 0, 0x20, 0xff}
			if (x/9+y/16)%3 == 0 && x%9 < 6 && y%16 > 3 && y%16 < 13 && (x+y)%4 != 0 {
				c = color.RGBA{0xaa, 0xaa, 0xaa, 0xff}
			}
			img.SetRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// libturbojpeg and image/jpeg agree on the picture (to the rounding of
// their IDCTs and chroma upsampling) and on the MCU; a JPEG that does not
// decode is an error either way.
func TestNativeMatchesImageJPEG(t *testing.T) {
	if ok, err := Native(); !ok {
		t.Skipf("libturbojpeg is not loaded (%v): apt-get install libturbojpeg0", err)
	}
	data := screen(t)
	got, block, ok, err := decodeNative(data)
	if !ok || err != nil {
		t.Fatalf("native decode: %v %v", ok, err)
	}
	want, wantBlock, err := decodeGo(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rect != want.Rect || block != wantBlock || block != image.Pt(16, 16) {
		t.Fatalf("native %v MCU %v, image/jpeg %v MCU %v", got.Rect, block, want.Rect, wantBlock)
	}
	var worst, off int
	for i := range got.Pix {
		d := int(got.Pix[i]) - int(want.Pix[i])
		if d < 0 {
			d = -d
		}
		worst = max(worst, d)
		if d > 8 {
			off++
		}
	}
	if worst > 48 || off > len(got.Pix)/100 {
		t.Fatalf("the decoders differ by up to %d, by more than 8 in %d of %d bytes", worst, off, len(got.Pix))
	}
	for i := 3; i < len(got.Pix); i += 4 {
		if got.Pix[i] != 0xff {
			t.Fatalf("alpha %d at byte %d", got.Pix[i], i)
		}
	}
	for _, bad := range [][]byte{data[:len(data)/2], []byte("not a jpeg at all")} {
		if _, _, err := Decode(bad); err == nil {
			t.Errorf("a broken JPEG of %d bytes decoded", len(bad))
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	data := screen(b)
	b.Run("native", func(b *testing.B) {
		if ok, err := Native(); !ok {
			b.Skip(err)
		}
		for b.Loop() {
			decodeNative(data)
		}
	})
	b.Run("image-jpeg", func(b *testing.B) {
		for b.Loop() {
			decodeGo(data)
		}
	})
}
