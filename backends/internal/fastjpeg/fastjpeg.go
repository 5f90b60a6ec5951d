// Package fastjpeg decodes a JPEG into RGBA pixels and answers its MCU, with
// libjpeg-turbo's TurboJPEG API (Debian's libturbojpeg0) where it is
// installed, loaded with dlopen on first use, and with image/jpeg where it
// is not (or in a build without cgo). A PiKVM screenshot is decoded on
// every call, for its digest, the waits and the stale-frame guard:
// libjpeg-turbo does that in a fraction of image/jpeg's time (BenchmarkDecode).
package fastjpeg

import (
	"bytes"
	"image"
	"image/draw"
	"image/jpeg"
	"runtime"
	"sync"
)

// Decode answers the JPEG's pixels and its MCU: 8x8, wider or taller where
// the chroma is subsampled (16x16 for the 4:2:0 of uStreamer).
func Decode(data []byte) (*image.RGBA, image.Point, error) {
	if img, block, ok, err := decodeNative(data); ok {
		return img, block, err
	}
	return decodeGo(data)
}

// Native answers whether libturbojpeg decodes here, and why not.
func Native() (bool, error) { return native() }

// decodeGo is Decode with image/jpeg.
func decodeGo(data []byte) (*image.RGBA, image.Point, error) {
	src, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, image.Point{}, err
	}
	block := image.Pt(8, 8)
	if y, ok := src.(*image.YCbCr); ok {
		switch y.SubsampleRatio {
		case image.YCbCrSubsampleRatio422:
			block = image.Pt(16, 8)
		case image.YCbCrSubsampleRatio420:
			block = image.Pt(16, 16)
		case image.YCbCrSubsampleRatio440:
			block = image.Pt(8, 16)
		case image.YCbCrSubsampleRatio411:
			block = image.Pt(32, 8)
		case image.YCbCrSubsampleRatio410:
			block = image.Pt(32, 16)
		}
	}
	bounds := src.Bounds()
	img := image.NewRGBA(image.Rect(0, 0, bounds.Dx(), bounds.Dy()))
	// The YCbCr to RGBA conversion is a third of the decoding: in bands,
	// on every core.
	n := min(runtime.GOMAXPROCS(0), 4)
	band := (img.Rect.Dy() + n - 1) / n
	var wg sync.WaitGroup
	for y := 0; y < img.Rect.Dy(); y += band {
		wg.Go(func() {
			r := image.Rect(0, y, img.Rect.Dx(), min(y+band, img.Rect.Dy()))
			draw.Draw(img, r, src, bounds.Min.Add(r.Min), draw.Src)
		})
	}
	wg.Wait()
	return img, block, nil
}
