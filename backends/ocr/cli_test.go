package ocr

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The tesseract command-line tool on a corpus frame, as a person would
// run it: its default settings (page segmentation 3), and the best
// settings found for screens (vision.md): the frame made grey and scaled
// 3x with a Lanczos filter, then sparse text (page segmentation 11). Its
// TSV is turned into lines (tesseract's own) for the same scoring.

// cliPage runs tesseract on the PNG file png with extra arguments, and
// answers its words as lines in the frame's pixels (coordinates divided by
// scale).
func cliPage(png, langs string, scale int, args ...string) (Page, error) {
	cmd := exec.Command("tesseract", append(append([]string{png, "-", "-l", langs}, args...), "tsv")...)
	cmd.Env = append(os.Environ(), "OMP_THREAD_LIMIT=1") // its fastest here (vision.md §1.2)
	out, err := cmd.Output()
	if err != nil {
		return Page{}, err
	}
	var p Page
	idx := map[int]int{}
	for _, w := range parseTSV(string(out)) {
		box := image.Rect(w.box.Min.X/scale, w.box.Min.Y/scale, (w.box.Max.X+scale-1)/scale, (w.box.Max.Y+scale-1)/scale)
		i, ok := idx[w.line]
		if !ok {
			i = len(p.Lines)
			idx[w.line] = i
			p.Lines = append(p.Lines, Line{})
		}
		l := &p.Lines[i]
		l.Words = append(l.Words, Word{Box: box, Text: w.text, Conf: w.conf})
		l.Box = l.Box.Union(box)
		if l.Text != "" {
			l.Text += " "
		}
		l.Text += w.text
	}
	return p, nil
}

// greyLanczos3x writes img made grey and scaled 3x with a Lanczos-3
// filter to a PNG file in dir, the tesseract CLI's best input.
func greyLanczos3x(t testing.TB, img *image.RGBA, dir string) string {
	t.Helper()
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	grey := make([]float64, w*h)
	for i := range grey {
		p := img.Pix[4*i:]
		grey[i] = 0.299*float64(p[0]) + 0.587*float64(p[1]) + 0.114*float64(p[2])
	}
	const k = 3
	// The weights of the 3 output phases, 6 taps each (a = 3, scale 3).
	lanczos := func(x float64) float64 {
		if x == 0 {
			return 1
		}
		if math.Abs(x) >= 3 {
			return 0
		}
		return 3 * math.Sin(math.Pi*x) * math.Sin(math.Pi*x/3) / (math.Pi * math.Pi * x * x)
	}
	type taps struct {
		first int
		w     [6]float64
	}
	phase := make([]taps, k)
	for p := range phase {
		src := (float64(p)+0.5)/k - 0.5
		first := int(math.Floor(src)) - 2
		sum := 0.0
		for i := range phase[p].w {
			phase[p].w[i] = lanczos(src - float64(first+i))
			sum += phase[p].w[i]
		}
		for i := range phase[p].w {
			phase[p].w[i] /= sum
		}
		phase[p].first = first
	}
	// Rows first (w -> 3w), then columns (h -> 3h).
	wide := make([]float64, 3*w*h)
	for y := 0; y < h; y++ {
		for o := 0; o < 3*w; o++ {
			ph := phase[o%k]
			base := o/k + ph.first
			v := 0.0
			for i := 0; i < 6; i++ {
				v += ph.w[i] * grey[y*w+min(max(base+i, 0), w-1)]
			}
			wide[y*3*w+o] = v
		}
	}
	out := image.NewGray(image.Rect(0, 0, 3*w, 3*h))
	for o := 0; o < 3*h; o++ {
		ph := phase[o%k]
		base := o/k + ph.first
		for x := 0; x < 3*w; x++ {
			v := 0.0
			for i := 0; i < 6; i++ {
				v += ph.w[i] * wide[min(max(base+i, 0), h-1)*3*w+x]
			}
			out.Pix[o*out.Stride+x] = uint8(min(max(v+0.5, 0), 255))
		}
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&b, out); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "lanczos3x.png")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// cliVersion answers the tesseract CLI's version line, or why there is none.
func cliVersion() (string, error) {
	out, err := exec.Command("tesseract", "--version").CombinedOutput()
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line, nil
}
