package ocr

import (
	"image"

	"github.com/poligon/poligon/backends/ocr/internal/glyphs"
)

// Reading a group of text on a character grid. Text on a terminal or a
// console stands in cells of one width: the group's first cell holds its
// leftmost ink, and each cell of the font starts its glyph at one of a few
// columns, so the grid's phase is one of a few; the rows are the group's,
// the baseline where most of its columns' ink ends. A group is read from
// the atlas when, at some cell width and phase, every cell with ink is one
// the atlas is sure of. Groups on one screen row, or one above the other
// in a window, share a grid: a group already read gives the next its phase
// to try first, and a short group (a prompt's "#", a lone "-"), which
// could fit several phases, is read only at such a phase or when every
// phase reads it the same.

// gridCell is one cell of a group read on a grid.
type gridCell struct {
	chars []rune // what it may read as; nil when blank
	frame bool   // box drawing or a block: not text
	known bool
	key   uint64
	left  int // its first inked column
}

// gridRead is a group read on a grid: its cells from x0, cw wide.
type gridRead struct {
	box          image.Rectangle
	face         face
	cw, x0, base int
	cells        []gridCell
	unknown      int      // cells with ink the atlas does not know
	inked        int      // cells with ink (frames included)
	pending      [][2]int // the stretches of unknown cells sent to tesseract
}

// cellBox answers the frame box of cell i, over the group's rows.
func (g gridRead) cellBox(i int) image.Rectangle {
	return image.Rect(g.x0+i*g.cw, g.box.Min.Y, g.x0+(i+1)*g.cw, g.box.Max.Y)
}

// gridReader reads the groups of one frame.
type gridReader struct {
	atlas *atlas
	px    []uint32
	ink   []bool
	w, h  int
	faces []face
	cell  glyphs.Cell
	done  []gridRead // groups read so far: the phases to try first
}

func newGridReader(a *atlas, px []uint32, ink []bool, w, h int) *gridReader {
	return &gridReader{atlas: a, px: px, ink: ink, w: w, h: h, faces: a.faces()}
}

// phase is a grid to try: a face, a first cell's column and a baseline
// (0: the group's own).
type phase struct {
	face     face
	x0, base int
}

// read reads group g on a grid. It answers the reading whose cells the
// atlas knows best (ok: all of them), or none when no cell width and
// phase fits even the group's first cell.
func (r *gridReader) read(g image.Rectangle) (gridRead, bool) {
	bg := ground(r.px, r.w, r.h, g)
	bases := r.baselines(g)
	var tries []phase
	// Phases of groups already read: one on the same row gives its
	// baseline too; one above or below in the same columns its grid.
	for i := len(r.done) - 1; i >= 0 && len(tries) < 4; i-- {
		d := r.done[i]
		sameRow := 2*(min(d.box.Max.Y, g.Max.Y)-max(d.box.Min.Y, g.Min.Y)) >= min(d.box.Dy(), g.Dy())
		sameColumns := d.box.Min.X < g.Max.X+d.cw && g.Min.X < d.box.Max.X+d.cw
		if !sameRow && !sameColumns {
			continue
		}
		x0 := d.x0 + floorDiv(g.Min.X-d.x0, d.cw)*d.cw
		base := 0
		if sameRow {
			base = d.base
		}
		tries = append(tries, phase{d.face, x0, base})
	}
	hinted := len(tries)
	for _, f := range r.faces {
		for left := 0; left < f.cw; left++ {
			if f.lefts&(1<<left) != 0 {
				tries = append(tries, phase{f, g.Min.X - left, 0})
			}
		}
	}
	var best gridRead
	found := false
	var readings []gridRead
	for i, p := range tries {
		cands := bases
		if p.base != 0 {
			cands = []int{p.base}
		}
		for _, base := range cands {
			gr, ok := r.cells(g, bg, p.face, p.x0, base)
			if !ok {
				continue
			}
			if !found || gr.unknown < best.unknown {
				best, found = gr, true
			}
			if gr.unknown > 0 {
				continue
			}
			// A group of three cells or more fits one grid only; a
			// shorter one is taken at a phase a neighbour gave, else
			// only when every phase reads it the same.
			if i < hinted || gr.inked >= 3 {
				r.done = append(r.done, gr)
				return gr, true
			}
			readings = append(readings, gr)
		}
	}
	if len(readings) > 0 {
		text := cellsText(readings[0])
		for _, o := range readings[1:] {
			if cellsText(o) != text {
				return best, false
			}
		}
		r.done = append(r.done, readings[0])
		return readings[0], true
	}
	return best, false
}

// cellsText is a reading's characters, for comparing readings.
func cellsText(g gridRead) string {
	var b []rune
	for _, c := range g.cells {
		if c.chars == nil {
			b = append(b, ' ')
		} else {
			b = append(b, c.chars...)
			b = append(b, '|')
		}
	}
	return string(b)
}

// cells reads group g (on background bg) as cells of face f from x0,
// against baseline; it answers false when the face's cell cannot hold
// the group or the first cell is not known (the phase is wrong, or the
// font unknown), so that a wrong phase costs one cell.
func (r *gridReader) cells(g image.Rectangle, bg uint32, f face, x0, base int) (gridRead, bool) {
	cw := f.cw
	if x0 < 0 || x0 > g.Min.X || g.Min.X-x0 >= cw {
		return gridRead{}, false
	}
	n := (g.Max.X - x0 + cw - 1) / cw
	if x0+n*cw > r.w {
		return gridRead{}, false
	}
	// The cell's rows: the face's whole cell where it is known (an
	// underscore below the group's ink is in it), else the group's.
	rows := g
	if f.asc > 0 {
		rows = image.Rect(g.Min.X, base-f.asc, g.Max.X, base+f.desc)
		if !g.In(rows) || rows.Min.Y < 0 || rows.Max.Y > r.h {
			return gridRead{}, false
		}
	}
	gr := gridRead{box: g, face: f, cw: cw, x0: x0, base: base, cells: make([]gridCell, n)}
	for i := range gr.cells {
		k, left, blank := r.cell.Key(r.px, r.w, bg, x0+i*cw, cw, rows, base)
		if blank {
			continue
		}
		gr.inked++
		c := gridCell{key: k, left: left}
		cc, ok := r.atlas.lookup(k)
		if !ok && f.asc > 0 {
			// A text cursor on the cell: the glyph under it, or none.
			alts, blank := r.cell.Alternatives(r.px, r.w, bg, x0+i*cw, cw, rows, base)
			if blank {
				gr.inked--
				continue
			}
			for _, a := range alts {
				if cc, ok = r.atlas.lookup(a); ok {
					break
				}
			}
		}
		if ok {
			c.known, c.chars, c.frame = true, cc.chars, cc.frame
		} else {
			gr.unknown++
			if i == 0 {
				return gridRead{}, false
			}
		}
		gr.cells[i] = c
	}
	return gr, true
}

// baselines answers where the ink of most of g's columns ends (the row
// below it), then the next most common such row.
func (r *gridReader) baselines(g image.Rectangle) []int {
	ends := map[int]int{}
	for x := g.Min.X; x < g.Max.X; x++ {
		for y := g.Max.Y - 1; y >= g.Min.Y; y-- {
			if r.ink[y*r.w+x] {
				ends[y+1]++
				break
			}
		}
	}
	first, second := 0, 0
	for y, n := range ends {
		switch {
		case n > ends[first] || n == ends[first] && y > first:
			first, second = y, first
		case n > ends[second] || n == ends[second] && y > second:
			second = y
		}
	}
	out := []int{first}
	if second != 0 {
		out = append(out, second)
	}
	return out
}
