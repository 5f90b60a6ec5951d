package rfb

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"testing"
	"time"
)

// BenchmarkFramePNG encodes the live frame as PNG the way a screenshot
// tool would (image/png, BestSpeed), for comparison with QMP screendump:
// SeaBIOS's 720x400 text screen and OVMF's 1280x800 graphics screen.
func BenchmarkFramePNG(b *testing.B) {
	for _, s := range []struct {
		name string
		opts qemuOptions
		ok   func(*image.RGBA) bool
	}{
		{"seabios-720x400", qemuOptions{}, func(f *image.RGBA) bool { return f.Rect.Dx() == 720 && notBlack(f) }},
		{"ovmf-1280x800", qemuOptions{ovmf: true}, func(f *image.RGBA) bool { return f.Rect.Dx() == 1280 && notBlack(f) }},
	} {
		b.Run(s.name, func(b *testing.B) {
			vm := startQEMU(b, s.opts)
			c := connect(b, Config{Dial: vm.dialer()})
			waitFrame(b, c, 120*time.Second, s.name, s.ok)
			enc := png.Encoder{CompressionLevel: png.BestSpeed}
			var buf bytes.Buffer
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, _, err := c.Frame(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				buf.Reset()
				if err := enc.Encode(&buf, f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "png-bytes")
		})
	}
}

// BenchmarkFrame measures Frame alone: a copy of the published frame.
func BenchmarkFrame(b *testing.B) {
	srv := newFakeServer(b)
	srv.width, srv.height = 1280, 800
	c := connect(b, Config{Dial: srv.dial})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := c.Frame(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkZRLEDecode decodes a 1280x800 frame of every tile kind.
func BenchmarkZRLEDecode(b *testing.B) {
	img := testImage(1280, 800, 3)
	data := zrleMessages(img)
	b.SetBytes(int64(len(img.Pix)))
	for i := 0; i < b.N; i++ {
		decodeAll(b, 1280, 800, data)
	}
}
