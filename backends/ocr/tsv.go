package ocr

import (
	"image"
	"strconv"
	"strings"
)

// word is one word tesseract read, its box in the pixels of the image it
// was given.
type word struct {
	box  image.Rectangle
	text string
	conf float64
	line int // tesseract's block/paragraph/line, flattened: words of one line share it
}

// parseTSV reads the word rows (level 5) of tesseract's TSV:
// level page block par line word left top width height conf text.
func parseTSV(tsv string) []word {
	var out []word
	for _, row := range strings.Split(tsv, "\n") {
		f := strings.SplitN(row, "\t", 12)
		if len(f) != 12 || f[0] != "5" {
			continue
		}
		text := strings.TrimSpace(f[11])
		if text == "" {
			continue
		}
		n := make([]int, 10)
		ok := true
		for i := 0; i < 10; i++ {
			v, err := strconv.Atoi(f[i])
			if err != nil {
				ok = false
				break
			}
			n[i] = v
		}
		conf, err := strconv.ParseFloat(f[10], 64)
		if !ok || err != nil {
			continue
		}
		out = append(out, word{
			box:  image.Rect(n[6], n[7], n[6]+n[8], n[7]+n[9]),
			text: text,
			conf: conf,
			line: n[2]<<20 | n[3]<<10 | n[4],
		})
	}
	return out
}
