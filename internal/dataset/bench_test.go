package dataset_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/dataset/datasettest"
)

// BenchmarkExport: export throughput on a synthetic capture of 2000
// 1280x800 frames (200 distinct screens, each with its dump and OCR
// words) against a benchmark of 100 frames: every frame read, decoded,
// fingerprinted and compared, its sidecars checked, and all of it
// written, synced and swapped in (--force replaces the previous run's).
func BenchmarkExport(b *testing.B) {
	const frames = 2000
	dir := b.TempDir()
	capture := filepath.Join(dir, "capture")
	began := time.Now()
	if _, err := datasettest.Capture(capture, datasettest.Spec{Sessions: 20, ShotsPerSession: frames / 20, W: 1280, H: 800, Distinct: 200}); err != nil {
		b.Fatal(err)
	}
	eval := filepath.Join(dir, "holo2-eval")
	if err := os.Mkdir(eval, 0o755); err != nil {
		b.Fatal(err)
	}
	for seed := int64(10000); seed < 10100; seed++ {
		if err := os.WriteFile(filepath.Join(eval, datasettest.ShotFile(seed)), datasettest.PNG(datasettest.Draw(seed, 1280, 800).Image), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("capture of %d frames written in %s", frames, time.Since(began).Round(time.Millisecond))
	o := dataset.Options{Dataset: capture, Out: filepath.Join(dir, "holo2-train"), Eval: eval, Seed: 1, ValFraction: 0.1, Force: true}
	var took time.Duration
	var exported int
	for b.Loop() {
		start := time.Now()
		rep, err := dataset.Export(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		exported = rep.Exported
	}
	if exported != frames {
		b.Fatalf("exported %d of %d frames", exported, frames)
	}
	b.ReportMetric(float64(frames*b.N)/took.Seconds(), "frames/s")
}
