package dataset

import (
	"bytes"
	"fmt"
	"image"
	"strconv"
	"strings"
)

// Word is one word OCR read, in frame pixels: the same shape as the OCR
// backend's word, so the capture code converts one into the other.
type Word struct {
	Box  image.Rectangle
	Text string
	Conf float64
}

// ocrHeader is the first line of every .ocr.tsv.
const ocrHeader = "x\ty\tw\th\ttext\tconf"

// FormatOCR writes words as a .ocr.tsv: a header, then x y w h text conf,
// one word a line, every word (no confidence cut).
func FormatOCR(words []Word) []byte {
	var b bytes.Buffer
	b.WriteString(ocrHeader + "\n")
	clean := strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")
	for _, w := range words {
		fmt.Fprintf(&b, "%d\t%d\t%d\t%d\t%s\t%s\n", w.Box.Min.X, w.Box.Min.Y, w.Box.Dx(), w.Box.Dy(),
			clean.Replace(w.Text), strconv.FormatFloat(w.Conf, 'f', -1, 64))
	}
	return b.Bytes()
}

// ParseOCR reads a .ocr.tsv, refusing a line that is not x y w h text conf
// (the header is optional).
func ParseOCR(b []byte) ([]Word, error) {
	var words []Word
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || i == 0 && line == ocrHeader {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			return nil, fmt.Errorf("line %d: %d fields, want x y w h text conf", i+1, len(f))
		}
		var n [4]int
		for j := range n {
			v, err := strconv.Atoi(f[j])
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", i+1, err)
			}
			n[j] = v
		}
		conf, err := strconv.ParseFloat(f[5], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		if n[2] < 0 || n[3] < 0 {
			return nil, fmt.Errorf("line %d: a negative size", i+1)
		}
		words = append(words, Word{Box: image.Rect(n[0], n[1], n[0]+n[2], n[1]+n[3]), Text: f[4], Conf: conf})
	}
	return words, nil
}
