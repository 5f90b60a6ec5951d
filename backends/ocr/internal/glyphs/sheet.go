package glyphs

import (
	"bufio"
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// A sheet is a guest's screen showing a font's repertoire on its grid
// (capture_test.go in package ocr writes them): a row of ten full blocks,
// whose extent gives the grid, then the characters, perrow a row, each
// followed by a space. Its .txt says what it shows:
//
//	face 6x13
//	perrow 50
//	chars !"#$%&'()*+...
//	frame ─│┌┐...
type Sheet struct {
	Face   string
	PerRow int
	Chars  []rune
	Frame  map[rune]bool
	// Narrow names a face of the same glyphs one column narrower: VGA
	// text mode draws 8-pixel glyphs in 9-pixel cells (the ninth column
	// blank, or the eighth again for line drawing), framebuffer consoles
	// draw the VGA font in 8-pixel cells.
	Narrow string
}

// ReadSheet reads a sheet's description (NAME.txt) and picture (NAME.png)
// and answers its glyphs, one a character it shows (blank cells, the
// characters the font lacks and draws as nothing, left out), and what
// struck it as odd.
func ReadSheet(base string) ([]Glyph, []string, error) {
	s, err := readSheetText(base + ".txt")
	if err != nil {
		return nil, nil, err
	}
	f, err := os.ReadFile(base + ".png")
	if err != nil {
		return nil, nil, err
	}
	img, err := png.Decode(bytes.NewReader(f))
	if err != nil {
		return nil, nil, fmt.Errorf("%s.png: %w", base, err)
	}
	return s.glyphs(img)
}

func readSheetText(path string) (Sheet, error) {
	f, err := os.Open(path)
	if err != nil {
		return Sheet{}, err
	}
	defer f.Close()
	s := Sheet{Frame: map[rune]bool{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		switch k {
		case "face":
			s.Face = v
		case "perrow":
			s.PerRow, err = strconv.Atoi(v)
		case "chars":
			s.Chars = []rune(v)
		case "frame":
			for _, r := range v {
				s.Frame[r] = true
			}
		case "narrow":
			s.Narrow = v
		}
		if err != nil {
			return Sheet{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	if s.Face == "" || s.PerRow <= 0 || len(s.Chars) == 0 {
		return Sheet{}, fmt.Errorf("%s: face, perrow and chars are needed", path)
	}
	return s, sc.Err()
}

// Packed answers img's pixels as packed RGB, row by row.
func Packed(img image.Image) ([]uint32, int, int) {
	b := img.Bounds()
	rgba := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(rgba, rgba.Bounds(), img, b.Min, draw.Src)
	w, h := b.Dx(), b.Dy()
	px := make([]uint32, w*h)
	for i := range px {
		p := rgba.Pix[4*i:]
		px[i] = uint32(p[0])<<16 | uint32(p[1])<<8 | uint32(p[2])
	}
	return px, w, h
}

// mostCommon answers the colour most pixels have.
func mostCommon(px []uint32) uint32 {
	n := map[uint32]int{}
	best := px[0]
	for _, p := range px {
		n[p]++
		if n[p] > n[best] {
			best = p
		}
	}
	return best
}

// SheetGrid answers the first cell of a sheet's row of ten full blocks
// (an error while it is not drawn yet).
func SheetGrid(img image.Image) (image.Rectangle, error) {
	px, w, h := Packed(img)
	return grid(px, w, h, mostCommon(px))
}

// grid finds the row of ten full blocks: its left, top, cell width and
// height.
func grid(px []uint32, w, h int, bg uint32) (image.Rectangle, error) {
	for y := 0; y < h; y++ {
		for x := 0; x < w; {
			if Distance(px[y*w+x], bg) < Faint {
				x++
				continue
			}
			c := px[y*w+x]
			e := x + 1
			for e < w && px[y*w+e] == c {
				e++
			}
			if n := e - x; n%10 == 0 && n >= 40 && n <= 300 {
				bottom := y + 1
				for bottom < h && px[bottom*w+x] == c && px[bottom*w+e-1] == c && (e == w || px[bottom*w+e] != c) {
					bottom++
				}
				// Ten cells, each taller than wide (at most three
				// times), on the background all round.
				cw, ch := n/10, bottom-y
				edge := func(x, y int) bool { return x < 0 || y < 0 || x >= w || y >= h || Distance(px[y*w+x], bg) < Faint }
				if ch >= cw && ch <= 3*cw && edge(x-1, y) && edge(e, y) && edge(x, y-1) && edge(x, bottom) && edge(e-1, bottom) {
					return image.Rect(x, y, x+cw, bottom), nil
				}
			}
			x = e
		}
	}
	return image.Rectangle{}, fmt.Errorf("no row of ten full blocks")
}

func (s Sheet) glyphs(img image.Image) ([]Glyph, []string, error) {
	px, w, h := Packed(img)
	bg := mostCommon(px)
	cell, err := grid(px, w, h, bg)
	if err != nil {
		return nil, nil, fmt.Errorf("sheet %s: %w", s.Face, err)
	}
	cw, ch := cell.Dx(), cell.Dy()
	at := func(i int) image.Rectangle { // the cell of the i-th character
		r, c := 1+i/s.PerRow, 2*(i%s.PerRow)
		return image.Rect(cell.Min.X+c*cw, cell.Min.Y+r*ch, cell.Min.X+(c+1)*cw, cell.Min.Y+(r+1)*ch)
	}
	if last := at(len(s.Chars) - 1); !last.In(image.Rect(0, 0, w, h)) {
		return nil, nil, fmt.Errorf("sheet %s: the %dx%d grid at %v runs off the picture", s.Face, cw, ch, cell.Min)
	}
	var c Cell
	// The baseline: where most of the letters that sit on it end.
	ends := map[int]int{}
	for i, r := range s.Chars {
		if strings.ContainsRune("HIEFLTxnmuzaeoc", r) {
			box := at(i)
			if g, ok := c.Glyph(px, w, bg, box.Min.X, cw, box, box.Min.Y); ok {
				ends[g.Top+g.H]++
			}
		}
	}
	base := 0
	for e, n := range ends {
		if n > ends[base] {
			base = e
		}
	}
	if ends[base] == 0 {
		return nil, nil, fmt.Errorf("sheet %s: no letters to find the baseline by", s.Face)
	}
	var out []Glyph
	var notes []string
	blank := func(box image.Rectangle) bool {
		_, ok := c.Glyph(px, w, bg, box.Min.X, cw, box, box.Min.Y)
		return !ok
	}
	for i, r := range s.Chars {
		box := at(i)
		g, ok := c.Glyph(px, w, bg, box.Min.X, cw, box, box.Min.Y+base)
		if !ok {
			notes = append(notes, fmt.Sprintf("%s: %q is blank (the font lacks it)", s.Face, r))
			continue
		}
		// The spaces beside each glyph are blank, unless it spills over.
		if !blank(box.Add(image.Pt(cw, 0))) || box.Min.X >= cw && !blank(box.Sub(image.Pt(cw, 0))) {
			notes = append(notes, fmt.Sprintf("%s: %q spills into the next cell", s.Face, r))
		}
		g.Face, g.Chars, g.Frame = s.Face, string(r), s.Frame[r]
		g.Asc, g.Desc = base, ch-base
		out = append(out, g)
	}
	if s.Narrow != "" {
		for _, g := range out[:len(out):len(out)] {
			out = append(out, narrow(g, s.Narrow))
		}
	}
	return out, notes, nil
}

// narrow answers g less its last column, as face.
func narrow(g Glyph, face string) Glyph {
	n := g
	n.Face, n.CW = face, g.CW-1
	n.Levels = make([]byte, 0, n.CW*g.H)
	for y := 0; y < g.H; y++ {
		n.Levels = append(n.Levels, g.Levels[y*g.CW:y*g.CW+n.CW]...)
	}
	return n
}

// Merge joins glyphs of one key: characters of two scripts that look the
// same (Latin A, Cyrillic А) become one glyph of both, to be told apart by
// the words around them; any other character whose glyph is one already
// seen (a fallback drawn for a character the font lacks, a look-alike in
// one script) is left out: the first, in the sheet's order (ASCII first),
// keeps the glyph.
func Merge(gs []Glyph) ([]Glyph, []string) {
	var out []Glyph
	var notes []string
	seen := map[uint64]int{}
	// Who keeps a glyph two characters share: ASCII first, then frames
	// (a line of ─ is far more common on a terminal than an em dash drawn
	// the same), then the rest.
	rank := func(g Glyph) int {
		switch r := []rune(g.Chars)[0]; {
		case r < 0x80:
			return 0
		case g.Frame:
			return 1
		}
		return 2
	}
	gs = slices.Clone(gs)
	slices.SortStableFunc(gs, func(a, b Glyph) int { return rank(a) - rank(b) })
	for _, g := range gs {
		k := g.Key()
		i, ok := seen[k]
		if !ok {
			seen[k] = len(out)
			out = append(out, g)
			continue
		}
		have := []rune(out[i].Chars)
		r := []rune(g.Chars)[0]
		if strings.ContainsRune(out[i].Chars, r) {
			continue // the same character in another face
		}
		if twin(have[0], r) {
			out[i].Chars += string(r)
			continue
		}
		notes = append(notes, fmt.Sprintf("%s: %q looks like %q: left out", g.Face, r, out[i].Chars))
	}
	return out, notes
}

// twin reports whether a and b are a Latin and a Cyrillic letter, or a
// letter and a digit, that a font may draw alike (A and А, З and 3, O
// and 0): the word around them tells which it is.
func twin(a, b rune) bool {
	kind := func(r rune) int {
		switch {
		case unicode.Is(unicode.Latin, r):
			return 1
		case unicode.Is(unicode.Cyrillic, r):
			return 2
		case unicode.IsDigit(r):
			return 3
		}
		return 0
	}
	ka, kb := kind(a), kind(b)
	return ka != 0 && kb != 0 && ka != kb
}
