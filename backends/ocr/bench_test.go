package ocr

import (
	"context"
	"image"
	"image/draw"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/latency"
)

// BenchmarkTinyXFrame reads testdata/tinyx/full.png, a tiny-x screen full
// of text (four 104x27 xterms, 6x13, two English and two Russian; made by
// engine's TestCaptureOCRFrame), and reports:
//   - cold-p50-ms: a frame never seen (an empty line cache);
//   - warm-p50-ms: the same screen with one word erased (one line changed);
//   - cli-p50-ms: the tesseract CLI on the same PNG, same languages, its
//     default page segmentation (OMP_THREAD_LIMIT=1, its fastest), and
//     ratio = cold / cli;
//   - recall-en, recall-ru: the share of the words put there that were
//     read (punctuation aside), and the CLI's, cli-recall-*.
func BenchmarkTinyXFrame(b *testing.B) {
	benchFrame(b, "testdata/tinyx/full.png",
		append(words(b, "testdata/tinyx/en1.txt"), words(b, "testdata/tinyx/en2.txt")...),
		append(words(b, "testdata/tinyx/ru1.txt"), words(b, "testdata/tinyx/ru2.txt")...))
}

// BenchmarkXFCEFrame is BenchmarkTinyXFrame on the debian-desktop
// template's screen (testdata/xfce/full.png, from the guest): XFCE's panel
// and wallpaper, xfce4-terminal with 20 lines in DejaVu Sans Mono (en.txt
// and ru.txt, the first 10 of each) and poligon-form's DejaVu Sans,
// anti-aliased.
func BenchmarkXFCEFrame(b *testing.B) {
	benchFrame(b, "testdata/xfce/full.png", words(b, "testdata/xfce/en.txt"), words(b, "testdata/xfce/ru.txt"))
}

func benchFrame(b *testing.B, png string, en, ru []string) {
	r := reader(b)
	img := loadPNG(b, png)
	first, err := r.Read(context.Background(), img) // engines up, and the lines to erase words of
	if err != nil {
		b.Fatal(err)
	}
	var cold, warm, cli latency.Latencies
	var cliEN, cliRU float64
	i := 0
	for b.Loop() {
		r.cache = newLineCache(r.cfg.CacheLines)
		cold.Time(func() {
			if _, err := r.Read(context.Background(), img); err != nil {
				b.Fatal(err)
			}
		})

		// One word erased, a different one each time: its line is new.
		l := first.Lines[i%len(first.Lines)]
		w := l.Words[len(l.Words)/2]
		changed := image.NewRGBA(img.Bounds())
		copy(changed.Pix, img.Pix)
		draw.Draw(changed, w.Box, image.NewUniform(img.At(l.Box.Min.X-1, l.Box.Min.Y)), image.Point{}, draw.Src)
		warm.Time(func() {
			p, err := r.Read(context.Background(), changed)
			if err != nil {
				b.Fatal(err)
			}
			if p.Read > 3 {
				b.Fatalf("one word erased: %d pieces read", p.Read)
			}
		})
		i++

		var out string
		cli.Time(func() {
			if out, err = tesseractCLI(png, r.cfg.Languages); err != nil {
				b.Skip(err)
			}
		})
		cliEN, cliRU = recallOf(out, en), recallOf(out, ru)
	}
	recEN, _ := recall(first, en)
	recRU, _ := recall(first, ru)
	cold.Report(b, "cold-")
	warm.Report(b, "warm-")
	cli.Report(b, "cli-")
	b.ReportMetric(cold.Quantile(0.5)/cli.Quantile(0.5), "ratio")
	b.ReportMetric(recEN, "recall-en")
	b.ReportMetric(recRU, "recall-ru")
	b.ReportMetric(cliEN, "cli-recall-en")
	b.ReportMetric(cliRU, "cli-recall-ru")
	b.ReportMetric(float64(len(first.Lines)), "lines")
}

func tesseractCLI(png, langs string) (string, error) {
	cmd := exec.Command("tesseract", png, "-", "-l", langs)
	cmd.Env = append(os.Environ(), "OMP_THREAD_LIMIT=1")
	out, err := cmd.Output()
	return string(out), err
}

// recallOf answers the share of want among the words of text.
func recallOf(text string, want []string) float64 {
	got := map[string]bool{}
	for _, w := range strings.Fields(text) {
		got[bare(w)] = true
	}
	hit := 0
	for _, w := range want {
		if got[w] {
			hit++
		}
	}
	return float64(hit) / float64(len(want))
}
