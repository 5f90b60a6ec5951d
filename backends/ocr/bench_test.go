package ocr

import (
	"context"
	"image"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/latency"
)

// BenchmarkTinyXFrame reads testdata/tinyx/full.png, a tiny-x screen full
// of text (four 104x27 xterms, 6x13, two English and two Russian; made by
// engine's TestCaptureOCRFrame), and reports:
//   - cold-p50-ms: a frame never seen (nothing remembered: no line
//     cached, no cell learned, no frame laid out; the seed atlas only);
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
		timeColdAndWarm(b, r, img, first, i, &cold, &warm)
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

// BenchmarkCorpus reads each frame of the accuracy corpus (testdata/
// corpus, one sub-benchmark each) and reports, per frame:
//   - cold-p50-ms: a read with nothing remembered (no line cached, no cell
//     learned: the seed atlas only);
//   - warm-p50-ms: the same screen with one word erased (a line changed);
//   - chars, words, cross: character accuracy, word recall and words read
//     with a letter of the other script (corpus_test.go's scoring), and
//     mono-chars, prop-words: the first over monospace regions, the second
//     over proportional ones;
//   - the same for the tesseract CLI on the same PNG, default settings
//     (cli-) and its best (best-: grey, 3x Lanczos, psm 11; the scaling is
//     not timed), and ratio = cold / best.
//
// BenchmarkCorpus/all reports the totals over the corpus.
func BenchmarkCorpus(b *testing.B) {
	r := reader(b)
	var total struct{ ours, cli, best, mono, prop score }
	for _, c := range loadCorpus(b) {
		b.Run(c.name, func(b *testing.B) {
			s := benchCorpusFrame(b, r, c)
			total.ours.add(s.ours)
			total.cli.add(s.cli)
			total.best.add(s.best)
			total.mono.add(s.mono)
			total.prop.add(s.prop)
		})
	}
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(float64(total.ours.crossScript), "cross")
		b.ReportMetric(float64(total.cli.crossScript), "cli-cross")
		b.ReportMetric(float64(total.best.crossScript), "best-cross")
		b.ReportMetric(total.ours.charAccuracy(), "chars")
		b.ReportMetric(total.mono.charAccuracy(), "mono-chars")
		b.ReportMetric(total.prop.wordRecall(), "prop-words")
		b.ReportMetric(total.cli.charAccuracy(), "cli-chars")
		b.ReportMetric(total.best.charAccuracy(), "best-chars")
	})
}

type frameScores struct{ ours, cli, best, mono, prop score }

func benchCorpusFrame(b *testing.B, r *Reader, c corpusFrame) frameScores {
	img := loadPNG(b, c.frame)
	best := greyLanczos3x(b, img, b.TempDir())
	var s frameScores
	r.forget()
	first, err := r.Read(context.Background(), img)
	if err != nil {
		b.Fatal(err)
	}
	s.ours = scoreRegions(first, c.regions, "")
	s.mono = scoreRegions(first, c.regions, "mono")
	s.prop = scoreRegions(first, c.regions, "prop")
	var cold, warm, cli, cliBest latency.Latencies
	i := 0
	for b.Loop() {
		timeColdAndWarm(b, r, img, first, i, &cold, &warm)
		i++
		var p Page
		cli.Time(func() {
			if p, err = cliPage(c.frame, r.cfg.Languages, 1); err != nil {
				b.Skip("the tesseract CLI:", err)
			}
		})
		s.cli = scoreRegions(p, c.regions, "")
		cliBest.Time(func() {
			if p, err = cliPage(best, r.cfg.Languages, 3, "--psm", "11"); err != nil {
				b.Skip("the tesseract CLI:", err)
			}
		})
		s.best = scoreRegions(p, c.regions, "")
	}
	cold.Report(b, "cold-")
	warm.Report(b, "warm-")
	cli.Report(b, "cli-")
	cliBest.Report(b, "best-")
	b.ReportMetric(cold.Quantile(0.5)/cliBest.Quantile(0.5), "ratio")
	for _, m := range []struct {
		prefix string
		s      score
	}{{"", s.ours}, {"cli-", s.cli}, {"best-", s.best}} {
		b.ReportMetric(m.s.charAccuracy(), m.prefix+"chars")
		b.ReportMetric(m.s.wordRecall(), m.prefix+"words")
		b.ReportMetric(float64(m.s.crossScript), m.prefix+"cross")
	}
	if s.mono.chars > 0 {
		b.ReportMetric(s.mono.charAccuracy(), "mono-chars")
	}
	if s.prop.chars > 0 {
		b.ReportMetric(s.prop.wordRecall(), "prop-words")
	}
	return s
}

// timeColdAndWarm times a cold read of img (nothing remembered) and a read
// of img with the i-th line of first (its reading) changed: one word
// erased, a different one each time.
func timeColdAndWarm(b *testing.B, r *Reader, img *image.RGBA, first Page, i int, cold, warm *latency.Latencies) {
	r.forget()
	cold.Time(func() {
		if _, err := r.Read(context.Background(), img); err != nil {
			b.Fatal(err)
		}
	})
	if len(first.Lines) == 0 {
		return
	}
	changed, _ := erase(img, first.Lines[i%len(first.Lines)])
	warm.Time(func() {
		if _, err := r.Read(context.Background(), changed); err != nil {
			b.Fatal(err)
		}
	})
}
