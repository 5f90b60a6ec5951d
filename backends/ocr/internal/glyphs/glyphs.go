// Package glyphs is what the OCR reader knows of a character cell: how a
// cell of screen pixels becomes a key, independent of its colours, and the
// seed atlas, glyphs of the fonts the guests draw text in, made by `go
// generate` from sheets those guests drew (sheets/, see sheets/README.md
// for where each font comes from and its licence).
//
// A cell is a column of the character grid, cw pixels wide, over the rows
// of a line of text. Its key is its ink: every pixel's distance from the
// background, as a share of the cell's strongest ink, in four levels (0
// none, 3 full), over the rows from the cell's first inked row to its last,
// and where those rows stand against the line's baseline. The same glyph
// in any colours on any background has one key (anti-aliased glyphs, as
// near as four levels can tell), and a cell's key never depends on its
// neighbours.
package glyphs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"

	"github.com/cespare/xxhash/v2"
)

// Glyph is one character cell's ink and what it reads as.
type Glyph struct {
	Face string // the sheet it comes from: "vga-9x16", "6x13bold", ...
	CW   int    // cell width
	// Top is the first inked row against the baseline (the first row
	// below letters without descenders): -11 for a 6x13 capital.
	Top    int
	H      int    // inked rows
	Left   int    // the first inked column in the cell
	Levels []byte // CW x H, row by row, 0-3
	// Chars is what the cell reads as: one character, or several that
	// look the same in this font (Latin A and Cyrillic А), to be told
	// apart by the script of the word around them.
	Chars string
	Frame bool // box drawing or a block: a frame, not text
	// Asc and Desc are the face's cell: rows above the baseline and from
	// it down (0 for a cell learned off a screen, whose face is unknown).
	Asc, Desc int
}

// Key answers the glyph's key, as Cell computes it for a screen cell.
func (g Glyph) Key() uint64 { return key(g.CW, g.Top, g.H, g.Levels) }

func key(cw, top, h int, levels []byte) uint64 {
	var head [4]byte
	head[0], head[1], head[2] = byte(cw), byte(int8(top)), byte(h)
	d := xxhash.New()
	d.Write(head[:])
	d.Write(levels)
	return d.Sum64()
}

// Faint is the strongest ink, as the largest per-channel difference from
// the background, below which a cell is blank: noise, dithering.
const Faint = 48

// Distance is the largest per-channel difference of two packed RGB
// colours.
func Distance(a, b uint32) int {
	d := 0
	for s := 0; s <= 16; s += 8 {
		x, y := int(a>>s&0xff), int(b>>s&0xff)
		d = max(d, x-y, y-x)
	}
	return d
}

// Cell is the reusable scratch of cell keys (one per goroutine).
type Cell struct {
	dist   []int
	levels []byte
}

// Key answers the key of the cell of frame px (w pixels a row, packed RGB)
// whose columns are x0..x0+cw and whose rows are those of rows, on
// background bg, against baseline (a frame row); blank says the cell has no
// ink. left is its first inked column (for the atlas's grid phases).
func (c *Cell) Key(px []uint32, w int, bg uint32, x0, cw int, rows image.Rectangle, baseline int) (k uint64, left int, blank bool) {
	levels, top, h, left := c.levelsOf(px, w, bg, x0, cw, rows)
	if levels == nil {
		return 0, 0, true
	}
	return key(cw, top-baseline, h, levels), left, false
}

// Glyph answers the cell as a glyph (for learning and for sheets), or
// false when it is blank.
func (c *Cell) Glyph(px []uint32, w int, bg uint32, x0, cw int, rows image.Rectangle, baseline int) (Glyph, bool) {
	levels, top, h, left := c.levelsOf(px, w, bg, x0, cw, rows)
	if levels == nil {
		return Glyph{}, false
	}
	return Glyph{CW: cw, Top: top - baseline, H: h, Left: left, Levels: append([]byte(nil), levels...)}, true
}

// Alternatives answers other keys a cell the atlas does not know may
// have, where a text cursor covers it: without an underline cursor (one
// to three full-width inked rows at the bottom of rows, the face's cell),
// and inverted (a block cursor over a glyph: the cell mostly ink, the
// glyph in the background's colour). blank reports an underline cursor
// over an empty cell.
func (c *Cell) Alternatives(px []uint32, w int, bg uint32, x0, cw int, rows image.Rectangle, baseline int) (keys []uint64, blank bool) {
	levels, top, h, _ := c.levelsOf(px, w, bg, x0, cw, rows)
	if levels == nil {
		return nil, false
	}
	full := func(r []byte) bool {
		for _, l := range r {
			if l < 2 {
				return false
			}
		}
		return true
	}
	// An underline: full rows at the bottom of the cell.
	if bottom := top + h; bottom > rows.Max.Y-3 {
		n := 0
		for n < 3 && n < h && full(levels[(h-1-n)*cw:(h-n)*cw]) {
			n++
		}
		if n > 0 && bottom-n >= rows.Max.Y-4 {
			above := levels[:(h-n)*cw]
			end := len(above)
			for end > 0 && above[end-1] == 0 {
				end--
			}
			if end == 0 {
				return nil, true
			}
			first := 0
			for above[first] == 0 {
				first++
			}
			t0, t1 := first/cw, (end+cw-1)/cw
			keys = append(keys, key(cw, top+t0-baseline, t1-t0, append([]byte(nil), above[t0*cw:t1*cw]...)))
		}
	}
	// A block: most of the cell inked; the glyph is what is not.
	inked := 0
	for _, l := range levels {
		if l >= 2 {
			inked++
		}
	}
	if 5*inked >= 3*cw*rows.Dy() {
		inv := make([]byte, cw*rows.Dy())
		// Over the whole cell: rows the levels do not cover are
		// background, full ink once inverted... but outside the block
		// they are background both ways; the block is the inked rows.
		for i := range inv {
			r := i / cw
			if r >= top-rows.Min.Y && r < top-rows.Min.Y+h {
				inv[i] = 3 - levels[(r-(top-rows.Min.Y))*cw+i%cw]
			}
		}
		t0, t1 := -1, 0
		for i, l := range inv {
			if l > 0 {
				if t0 < 0 {
					t0 = i / cw
				}
				t1 = i/cw + 1
			}
		}
		if t0 >= 0 {
			keys = append(keys, key(cw, rows.Min.Y+t0-baseline, t1-t0, inv[t0*cw:t1*cw]))
		}
	}
	return keys, false
}

// levelsOf answers the cell's levels over its inked rows (nil: blank),
// the first inked row (a frame row), their count and the first inked
// column.
func (c *Cell) levelsOf(px []uint32, w int, bg uint32, x0, cw int, rows image.Rectangle) ([]byte, int, int, int) {
	if x0 < 0 || x0+cw > w || cw <= 0 {
		return nil, 0, 0, 0
	}
	n := cw * rows.Dy()
	if cap(c.dist) < n {
		c.dist = make([]int, n)
		c.levels = make([]byte, n)
	}
	dist := c.dist[:n]
	far := 0
	for y := rows.Min.Y; y < rows.Max.Y; y++ {
		row := px[y*w+x0 : y*w+x0+cw]
		o := dist[(y-rows.Min.Y)*cw:]
		for x, p := range row {
			d := Distance(p, bg)
			o[x] = d
			far = max(far, d)
		}
	}
	if far < Faint {
		return nil, 0, 0, 0
	}
	levels := c.levels[:n]
	top, bottom, left := -1, 0, cw
	for i, d := range dist {
		l := byte((6*d + far) / (2 * far)) // round(3 d / far)
		levels[i] = l
		if l > 0 {
			r := i / cw
			if top < 0 {
				top = r
			}
			bottom = r + 1
			left = min(left, i%cw)
		}
	}
	return levels[top*cw : bottom*cw], rows.Min.Y + top, bottom - top, left
}

// The seed file: "glyphs1\n", then the glyphs, each a record of
// uvarints and bytes: face index, cw, asc, desc, top+128, h, left, frame,
// the characters (length, UTF-8), the levels (two bits a pixel); the
// faces' names come first (count, then length and bytes each).
const magic = "glyphs2\n"

// Encode writes glyphs in the seed format.
func Encode(gs []Glyph) []byte {
	out := []byte(magic)
	var faces []string
	index := map[string]int{}
	for _, g := range gs {
		if _, ok := index[g.Face]; !ok {
			index[g.Face] = len(faces)
			faces = append(faces, g.Face)
		}
	}
	out = binary.AppendUvarint(out, uint64(len(faces)))
	for _, f := range faces {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	out = binary.AppendUvarint(out, uint64(len(gs)))
	for _, g := range gs {
		frame := 0
		if g.Frame {
			frame = 1
		}
		for _, v := range []int{index[g.Face], g.CW, g.Asc, g.Desc, g.Top + 128, g.H, g.Left, frame, len(g.Chars)} {
			out = binary.AppendUvarint(out, uint64(v))
		}
		out = append(out, g.Chars...)
		packed := make([]byte, (len(g.Levels)+3)/4)
		for i, l := range g.Levels {
			packed[i/4] |= l << (2 * (i % 4))
		}
		out = append(out, packed...)
	}
	return out
}

// Decode reads the seed format.
func Decode(b []byte) ([]Glyph, error) {
	if len(b) < len(magic) || string(b[:len(magic)]) != magic {
		return nil, errors.New("glyphs: not a seed file")
	}
	b = b[len(magic):]
	bad := errors.New("glyphs: the seed file is cut short or damaged")
	next := func() (int, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<20 {
			return 0, bad
		}
		b = b[n:]
		return int(v), nil
	}
	take := func(n int) ([]byte, error) {
		if n > len(b) {
			return nil, bad
		}
		out := b[:n]
		b = b[n:]
		return out, nil
	}
	nf, err := next()
	if err != nil {
		return nil, err
	}
	faces := make([]string, nf)
	for i := range faces {
		n, err := next()
		if err != nil {
			return nil, err
		}
		s, err := take(n)
		if err != nil {
			return nil, err
		}
		faces[i] = string(s)
	}
	ng, err := next()
	if err != nil {
		return nil, err
	}
	gs := make([]Glyph, 0, ng)
	for i := 0; i < ng; i++ {
		var v [9]int
		for j := range v {
			if v[j], err = next(); err != nil {
				return nil, err
			}
		}
		if v[0] >= len(faces) {
			return nil, bad
		}
		chars, err := take(v[8])
		if err != nil {
			return nil, err
		}
		g := Glyph{Face: faces[v[0]], CW: v[1], Asc: v[2], Desc: v[3], Top: v[4] - 128, H: v[5], Left: v[6], Frame: v[7] == 1, Chars: string(chars)}
		packed, err := take((g.CW*g.H + 3) / 4)
		if err != nil {
			return nil, err
		}
		g.Levels = make([]byte, g.CW*g.H)
		for j := range g.Levels {
			g.Levels[j] = packed[j/4] >> (2 * (j % 4)) & 3
		}
		gs = append(gs, g)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("glyphs: %d bytes after the last glyph", len(b))
	}
	return gs, nil
}
