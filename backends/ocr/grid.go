package ocr

import (
	"image"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

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

// segments answers the words of a group read on a grid, as lines: two
// blank cells or more (or frame cells: box drawing is not text) part
// lines, one parts words. The words of the stretches of cells the atlas
// did not know are tesseract's (read: by stretch), but for answers with
// no letter or digit: a picture in a line of text (the mouse pointer
// beside a menu entry), which the atlas would know were it punctuation.
func (g gridRead) segments(read map[int][]Word) [][]*draftWord {
	var out [][]*draftWord
	var line []*draftWord
	var cur *draftWord
	gap := 0
	next := 0 // the next stretch
	for i := 0; i < len(g.cells); i++ {
		c := g.cells[i]
		for next < len(g.pending) && g.known(g.pending[next]) {
			next++ // the atlas knows it now
		}
		if next < len(g.pending) && i == g.pending[next][0] {
			st := g.pending[next]
			ws := read[next]
			next++
			i = st[1] - 1
			cur = nil
			if !strings.ContainsFunc(joinWords(ws), func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
				gap += st[1] - st[0]
				continue
			}
			if gap >= 2 && len(line) > 0 {
				out = append(out, line)
				line = nil
			}
			gap = 0
			line = append(line, g.stretchWords(st, ws)...)
			continue
		}
		if c.chars == nil || c.frame {
			cur = nil
			gap++
			continue
		}
		if gap >= 2 && len(line) > 0 {
			out = append(out, line)
			line = nil
		}
		gap = 0
		if cur == nil {
			cur = &draftWord{conf: 100, grid: true}
			line = append(line, cur)
		}
		cur.cands = append(cur.cands, c.chars)
		cur.box = cur.box.Union(g.cellBox(i))
	}
	if len(line) > 0 {
		out = append(out, line)
	}
	return out
}

// stretchWords answers tesseract's words for stretch st; where they fall
// one character to a cell, word by word, the cells the atlas knows keep
// its characters (tesseract's "af" for a known "d" and an unknown "f"
// reads "df").
func (g gridRead) stretchWords(st [2]int, ws []Word) []*draftWord {
	runs := g.runs(st)
	fits := len(runs) == len(ws)
	for k := 0; fits && k < len(ws); k++ {
		fits = utf8.RuneCountInString(ws[k].Text) == runs[k][1]-runs[k][0]
	}
	var out []*draftWord
	for k, wd := range ws {
		dw := &draftWord{box: wd.Box, conf: wd.Conf}
		for i, r := range []rune(wd.Text) {
			c := []rune{r}
			if fits {
				if cell := g.cells[runs[k][0]+i]; cell.known {
					c = cell.chars
				}
			}
			dw.cands = append(dw.cands, c)
		}
		if fits {
			dw.box = image.Rect(g.x0+runs[k][0]*g.cw, g.box.Min.Y, g.x0+runs[k][1]*g.cw, g.box.Max.Y)
		}
		out = append(out, dw)
	}
	return out
}

// runs answers the runs [from, to) of inked cells in stretch st: its
// words.
func (g gridRead) runs(st [2]int) [][2]int {
	var out [][2]int
	for i := st[0]; i < st[1]; {
		if g.cells[i].key == 0 { // blank
			i++
			continue
		}
		j := i
		for j < st[1] && g.cells[j].key != 0 {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

func joinWords(ws []Word) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString(w.Text)
	}
	return b.String()
}

// known reports whether the atlas knows every inked cell of stretch st.
func (g gridRead) known(st [2]int) bool {
	for _, c := range g.cells[st[0]:st[1]] {
		if c.key != 0 && !c.known {
			return false
		}
	}
	return true
}

// lookupAgain looks up the cells of g the atlas did not know.
func (g *gridRead) lookupAgain(a *atlas) {
	for i, c := range g.cells {
		if c.key != 0 && !c.known {
			if cc, ok := a.lookup(c.key); ok {
				g.cells[i].known, g.cells[i].chars, g.cells[i].frame = true, cc.chars, cc.frame
			}
		}
	}
}

// stretches answers the stretches [from, to) of g's cells that hold the
// cells the atlas does not know: runs of inked cells with one unknown at
// least, joined across single blank cells (a phrase reads better whole).
func (g gridRead) stretches() [][2]int {
	var out [][2]int
	for i := 0; i < len(g.cells); {
		if g.cells[i].key == 0 {
			i++
			continue
		}
		j, unknown := i, false
		for j < len(g.cells) && g.cells[j].key != 0 {
			unknown = unknown || !g.cells[j].known
			j++
		}
		if unknown {
			if n := len(out); n > 0 && out[n-1][1]+1 == i {
				out[n-1][1] = j
			} else {
				out = append(out, [2]int{i, j})
			}
		}
		i = j
	}
	return out
}

// stretchBox answers the part of the group stretch st covers: its cells'
// columns over the group's rows.
func (g gridRead) stretchBox(st [2]int) image.Rectangle {
	return image.Rect(g.x0+st[0]*g.cw, g.box.Min.Y, g.x0+st[1]*g.cw, g.box.Max.Y).Intersect(g.box)
}

// learnFrom teaches the atlas the cells of stretch st of a group read on a
// grid, where tesseract's words for it are certain: their characters fall
// one to a cell with ink, word by word, and agree with every cell the
// atlas already knows.
func (r *Reader) learnFrom(g gridRead, st [2]int, words []Word) {
	runs := g.runs(st) // the runs of inked cells are the words
	if len(runs) != len(words) {
		return
	}
	var obs []observation
	for k, wd := range words {
		chars := []rune(wd.Text)
		rn := runs[k]
		if len(chars) != rn[1]-rn[0] || wd.Conf < learnConf {
			return
		}
		for i, c := range chars {
			cell := g.cells[rn[0]+i]
			if cell.known {
				if !slices.Contains(cell.chars, c) {
					return // tesseract misread a cell the atlas knows: trust none of this read
				}
				continue
			}
			obs = append(obs, observation{key: cell.key, char: c, cw: g.cw, left: cell.left})
		}
	}
	r.atlas.learn(obs)
}

// learnConf is the least tesseract word confidence a read teaches the
// atlas with.
const learnConf = 80

// stretchScale is the least scale of a stretch's crop.
const stretchScale = 3
