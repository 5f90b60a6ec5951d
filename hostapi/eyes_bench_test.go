package hostapi_test

import (
	"context"
	"image"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/vision/visiontest"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/latency"
)

// BenchmarkSee measures ui_see's own cost around the model: a list served
// from the frame cache (cached-p50-ms), and what an uncached call adds to
// the model's HTTP round trip (overhead-p50-ms: the frame resized and
// encoded, the request, the answer parsed, the cache), against visiontest,
// which answers at once.
func BenchmarkSee(b *testing.B) {
	fake := visiontest.New()
	defer fake.Close()
	fake.SetTruth(&visiontest.Truth{Coords: "permille", W: 1280, H: 800, Elements: []visiontest.Element{
		{X: 640, Y: 400, Type: "button", Label: "OK"}, {X: 700, Y: 400, Type: "button", Label: "Cancel"},
	}})
	_, v, ctx := eyes(b, fake)
	f, err := v.Shot(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := v.See(ctx, f, nil); err != nil {
		b.Fatal(err)
	}
	var cached, overhead latency.Latencies
	n := 0
	for b.Loop() {
		cached.Time(func() {
			if s, err := v.See(context.Background(), f, nil); err != nil || !s.Cached {
				b.Fatalf("cached See: %+v, %v", s, err)
			}
		})

		// A frame never seen: one pixel differs.
		n++
		g := f
		g.Image = cloneRGBA(f)
		g.Image.Pix[(n%1000)*4] ^= 0xff
		start := time.Now()
		s, err := v.See(context.Background(), g, nil)
		if err != nil || s.Cached {
			b.Fatalf("uncached See: %+v, %v", s, err)
		}
		overhead = append(overhead, time.Since(start)-s.Took)
	}
	cached.Report(b, "cached-")
	overhead.Report(b, "overhead-")
}

func cloneRGBA(f hostapi.Frame) *image.RGBA {
	img := image.NewRGBA(f.Image.Bounds())
	copy(img.Pix, f.Image.Pix)
	return img
}
