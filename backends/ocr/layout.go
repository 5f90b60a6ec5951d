package ocr

import (
	"image"
	"slices"
	"sort"
)

// Finding text on a screen. Screens are not pages: text sits on flat
// backgrounds of any colour, in windows side by side, often 10-13 px tall.
// Tesseract's own layout merges columns and skips white-on-colour rows
// (vision.md §0), so the reader finds the text itself, in four passes:
//
//  1. ink: a pixel is background when it lies in a long run of one colour,
//     across or down; glyph strokes are short both ways, so what remains is
//     glyphs (window borders, being long one way, are background);
//  2. blobs: the connected pieces of ink;
//  3. groups: blobs that share a baseline band and stand closer than about
//     a line height merge into word groups ("Username: test" is one group,
//     three spaces later "Password:" is the next);
//  4. lines: groups on one band over one background are recognised together.

// Runs of one colour at least this long are background.
const (
	minRunAcross = 12 // longer than any stroke of a screen font up to ~24 px
	minRunDown   = 36 // taller than a glyph, shorter than a window
	colourTol    = 24 // per channel: antialiasing and dithering stay one colour
)

// similar compares two packed RGB colours within colourTol per channel.
func similar(a, b uint32) bool {
	if a == b {
		return true // the common case, cheap
	}
	d := func(x, y uint32) uint32 {
		if x > y {
			return x - y
		}
		return y - x
	}
	return d(a>>16&0xff, b>>16&0xff) <= colourTol && d(a>>8&0xff, b>>8&0xff) <= colourTol && d(a&0xff, b&0xff) <= colourTol
}

// rgb is the packed colour of every pixel of img, row by row.
func rgb(img *image.RGBA) []uint32 {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	out := make([]uint32, w*h)
	for y := 0; y < h; y++ {
		row := img.Pix[y*img.Stride : y*img.Stride+w*4]
		o := out[y*w : (y+1)*w]
		for x := range o {
			o[x] = uint32(row[4*x])<<16 | uint32(row[4*x+1])<<8 | uint32(row[4*x+2])
		}
	}
	return out
}

// inkMask answers, for each pixel, whether it is ink (not background).
func inkMask(px []uint32, w, h int) []bool {
	bg := make([]bool, len(px))
	// Across: runs of similar colour (similar to the run's first pixel).
	for y := 0; y < h; y++ {
		row := px[y*w : (y+1)*w]
		for x := 0; x < w; {
			e := x + 1
			for e < w && similar(row[e], row[x]) {
				e++
			}
			if e-x >= minRunAcross {
				for i := x; i < e; i++ {
					bg[y*w+i] = true
				}
			}
			x = e
		}
	}
	// Down: long runs, and short ones whose ends are background across
	// (the gap between two letters on a highlight bar not much taller than
	// the text: the rows above and below the text are long runs; between
	// the letters, the letters cut the rows short).
	for x := 0; x < w; x++ {
		for y := 0; y < h; {
			e := y + 1
			for e < h && similar(px[e*w+x], px[y*w+x]) {
				e++
			}
			if e-y >= minRunDown || bg[y*w+x] && bg[(e-1)*w+x] {
				for i := y; i < e; i++ {
					bg[i*w+x] = true
				}
			}
			y = e
		}
	}
	ink := bg // reuse: ink is the complement
	for i := range ink {
		ink[i] = !ink[i]
	}
	// What is ink all the way down for longer than text is tall is a rule
	// or a patterned window border (twm's is a 2 px checkerboard: no run of
	// one colour, so the passes above keep half of it), never text. Gaps
	// of one pixel do not break such a line; text lines stand further
	// apart.
	for x := 0; x < w; x++ {
		for y := 0; y < h; {
			if !ink[y*w+x] {
				y++
				continue
			}
			e := y + 1
			for e < h && (ink[e*w+x] || e+1 < h && ink[(e+1)*w+x]) {
				e++
			}
			if e-y > maxTextHeight {
				for i := y; i < e; i++ {
					ink[i*w+x] = false
				}
			}
			y = e
		}
	}
	return ink
}

// blobs answers the bounding boxes of the 8-connected pieces of ink, found
// run by run with a union-find over the runs.
func blobs(ink []bool, w, h int) []image.Rectangle {
	type run struct{ y, x0, x1 int } // [x0, x1)
	var runs []run
	rowStart := make([]int, h+1)
	for y := 0; y < h; y++ {
		rowStart[y] = len(runs)
		row := ink[y*w : (y+1)*w]
		for x := 0; x < w; {
			if !row[x] {
				x++
				continue
			}
			e := x + 1
			for e < w && row[e] {
				e++
			}
			runs = append(runs, run{y, x, e})
			x = e
		}
	}
	rowStart[h] = len(runs)
	parent := make([]int32, len(runs))
	for i := range parent {
		parent[i] = int32(i)
	}
	var find func(int32) int32
	find = func(i int32) int32 {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	for y := 1; y < h; y++ {
		prev := runs[rowStart[y-1]:rowStart[y]]
		j := 0
		for i := rowStart[y]; i < rowStart[y+1]; i++ {
			r := runs[i]
			for j < len(prev) && prev[j].x1 < r.x0 { // 8-connected: touching corners join
				j++
			}
			for k := j; k < len(prev) && prev[k].x0 <= r.x1; k++ {
				a, b := find(int32(i)), find(int32(rowStart[y-1]+k))
				if a != b {
					parent[a] = b
				}
			}
		}
	}
	out, _ := unite(len(runs), func(i int) int { return int(find(int32(i))) }, func(i int) image.Rectangle {
		return image.Rect(runs[i].x0, runs[i].y, runs[i].x1, runs[i].y+1)
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Min.X != out[j].Min.X {
			return out[i].Min.X < out[j].Min.X
		}
		return out[i].Min.Y < out[j].Min.Y
	})
	return out
}

// Blob shapes that are not text.
const (
	maxTextHeight = 64 // taller blobs are pictures, icons or rules
	minTextHeight = 5  // with nothing of text height beside them, smaller blobs are specks
)

// groups merges blobs into word groups: blobs whose vertical extents
// overlap by half the smaller one (so dots, commas and accents join their
// letters) and whose gap is under about a line height. Twice: letters into
// words first (small gaps), then words into groups, when each word's
// height tells the line's (a word of x-height letters alone would not).
//
// Words join a group only over one background: a text cursor two cells
// after a highlighted item, or a label beside a button, stays apart.
func groups(px []uint32, w, h int, bs []image.Rectangle) []image.Rectangle {
	// Pictures go, and what is drawn inside a box that goes (the dot in
	// twm's iconify button, a checkbox's mark): it is part of the picture.
	var boxes []image.Rectangle
	bs = slices.DeleteFunc(slices.Clone(bs), func(b image.Rectangle) bool {
		if b.Dy() > maxTextHeight || cursor(px, w, h, b) {
			boxes = append(boxes, b)
			return true
		}
		return false
	})
	bs = slices.DeleteFunc(bs, func(b image.Rectangle) bool {
		for _, c := range boxes {
			if c.Dy() <= 40 && b.In(c.Inset(1)) {
				return true
			}
		}
		return false
	})
	bs = dropBorders(bs)
	bs = accents(bs)
	// A letter joins a blob at most twice its height, sharing half the
	// taller one's rows, over the same background (marks smaller than text
	// are exempt): a taller blob, one on another ground or one that shares
	// less is a picture's stroke (a wallpaper's line beside a window) or
	// the mouse pointer's I-beam standing across two lines, which would
	// otherwise join the text beside it, and the lines it touches, into one.
	blobGround := make([]uint32, len(bs))
	groundOf := func(i int) uint32 {
		if blobGround[i] == 0 {
			blobGround[i] = ground(px, w, h, bs[i]) | 1<<24 // known
		}
		return blobGround[i] &^ (1 << 24)
	}
	words, members := merge(bs, func(i, j int) int { return max(bs[i].Dy(), bs[j].Dy()) / 2 }, func(i, j int) bool {
		lo, hi := min(bs[i].Dy(), bs[j].Dy()), max(bs[i].Dy(), bs[j].Dy())
		ov := min(bs[i].Max.Y, bs[j].Max.Y) - max(bs[i].Min.Y, bs[j].Min.Y)
		return (mark(bs[i], bs[j]) || hi <= 2*lo && 2*ov >= hi) && similar(groundOf(i), groundOf(j))
	})
	// A word space is about one character wide (monospace: exactly one
	// cell), two or more part groups: the limit is twice the word's glyph
	// width (the median of its blobs, at most its height).
	glyph := make([]int, len(words))
	grounds := make([]uint32, len(words))
	for i, b := range words {
		ws := make([]int, 0, len(members[i]))
		for _, m := range members[i] {
			ws = append(ws, bs[m].Dx())
		}
		slices.Sort(ws)
		glyph[i] = min(ws[len(ws)/2], b.Dy())
		grounds[i] = ground(px, w, h, b)
	}
	// Words share half the taller one's rows too: a blob that bridges two
	// lines (the I-beam drawn over letters of both, one connected piece)
	// joins the line it shares most with, not both.
	gs, _ := merge(words, func(i, j int) int { return 2 * max(glyph[i], glyph[j]) },
		func(i, j int) bool {
			lo, hi := min(words[i].Dy(), words[j].Dy()), max(words[i].Dy(), words[j].Dy())
			ov := min(words[i].Max.Y, words[j].Max.Y) - max(words[i].Min.Y, words[j].Min.Y)
			return similar(grounds[i], grounds[j]) && (lo < minTextHeight || mark(words[i], words[j]) || 2*ov >= hi)
		})
	// Too short to be text, or a line one pixel wide (the edge of a
	// cursor, a rule's stub).
	gs = slices.DeleteFunc(gs, func(g image.Rectangle) bool { return g.Dy() < minTextHeight || g.Dx() < 2 })
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].Min.Y != gs[j].Min.Y {
			return gs[i].Min.Y < gs[j].Min.Y
		}
		return gs[i].Min.X < gs[j].Min.X
	})
	return gs
}

// dropBorders drops the thin upright strokes that stand taller than any
// text near them: the sides of a button or an entry (GTK's), too short to
// be rules, which tesseract reads as "I", "1" or "J". A tall thin glyph
// ("l" in a heading) has letters as tall beside it. bs is sorted by Min.X.
func dropBorders(bs []image.Rectangle) []image.Rectangle {
	border := func(i int) bool {
		b := bs[i]
		if b.Dx() > 4 || b.Dy() < 20 || b.Dy() < 4*b.Dx() {
			return false
		}
		for j := sort.Search(len(bs), func(k int) bool { return bs[k].Min.X >= b.Min.X-2*b.Dy() }); j < len(bs) && bs[j].Min.X < b.Max.X+2*b.Dy(); j++ {
			c := bs[j]
			if j != i && c.Dx() > 4 && 5*c.Dy() >= 4*b.Dy() && sameRow(b, c) {
				return false
			}
		}
		return true
	}
	out := bs[:0:0]
	for i, b := range bs {
		if !border(i) {
			out = append(out, b)
		}
	}
	return out
}

// accents joins each small mark to the letter right under it (a breve, dots,
// an accent: "й", "ё", "ü"). Over letters of x-height only ("выйти") such a
// mark shares no rows with the word and would be lost, and "й" read as
// "и". bs is sorted by Min.X.
func accents(bs []image.Rectangle) []image.Rectangle {
	out := slices.Clone(bs)
	gone := make([]bool, len(out))
	for i, m := range bs {
		if m.Dy() > 3 || m.Dx() > 8 || punctuation(bs, i) {
			continue
		}
		// The nearest letter under the mark, overlapping it across.
		best, bestGap := -1, 4
		for j := sort.Search(len(bs), func(k int) bool { return bs[k].Min.X >= m.Min.X-8 }); j < len(bs) && bs[j].Min.X < m.Max.X; j++ {
			c := bs[j]
			if j == i || c.Dy() <= 3 || c.Max.X <= m.Min.X {
				continue
			}
			if gap := c.Min.Y - m.Max.Y; gap >= 0 && gap < bestGap {
				best, bestGap = j, gap
			}
		}
		if best >= 0 {
			out[best] = out[best].Union(m)
			gone[i] = true
		}
	}
	kept := out[:0]
	for i, b := range out {
		if !gone[i] {
			kept = append(kept, b)
		}
	}
	return kept
}

// mark reports whether the smaller of a and b is a mark beside the other:
// at most 6 pixels and 3/5 of the other's height, its middle within the
// other's rows or two pixels off (a period, a comma hanging below the
// line, a hyphen, an apostrophe). A letter is no mark, even beside
// something much taller (the mouse pointer's I-beam).
func mark(a, b image.Rectangle) bool {
	if a.Dy() > b.Dy() {
		a, b = b, a
	}
	mid := (a.Min.Y + a.Max.Y) / 2
	return a.Dy() <= 6 && 5*a.Dy() <= 3*b.Dy() && mid >= b.Min.Y-2 && mid < b.Max.Y+2
}

// punctuation reports whether mark bs[i] sits low on a line of letters
// beside it (a period, a comma, the dot of a colon): where lines stand
// close (6x13), such a mark would otherwise count as the accent of a
// letter of the next line, and join the two lines. bs is sorted by Min.X.
func punctuation(bs []image.Rectangle, i int) bool {
	m := bs[i]
	mid := (m.Min.Y + m.Max.Y) / 2
	for j := sort.Search(len(bs), func(k int) bool { return bs[k].Min.X >= m.Min.X-2*m.Dx()-12 }); j < len(bs) && bs[j].Min.X < m.Max.X+12; j++ {
		c := bs[j]
		if j == i || c.Dy() <= 3 || c.Max.X <= m.Min.X && m.Min.X-c.Max.X > 12 {
			continue
		}
		if mid >= c.Min.Y+c.Dy()/2 && mid <= c.Max.Y+2 && (c.Max.X <= m.Min.X || c.Min.X >= m.Max.X) {
			return true
		}
	}
	return false
}

// merge unites boxes that share a band and whose gap is at most limit(i, j)
// and, when alike is set, that it finds alike; it answers the united boxes
// sorted by Min.X, and the boxes each is made of.
func merge(bs []image.Rectangle, limit func(i, j int) int, alike func(i, j int) bool) ([]image.Rectangle, [][]int) {
	order := make([]int, len(bs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bs[order[a]].Min.X < bs[order[b]].Min.X })
	parent := make([]int, len(bs))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	// Boxes that overlap vertically share a band of rows: compare within
	// bands only (each keeps bs's order by Min.X), looking ahead only as
	// far as the widest gap.
	const band = 32
	bands := map[int][]int{}
	for _, i := range order {
		b := bs[i]
		for k := b.Min.Y / band; k <= (b.Max.Y-1)/band; k++ {
			bands[k] = append(bands[k], i)
		}
	}
	for _, idx := range bands {
		for p, i := range idx {
			a := bs[i]
			for _, j := range idx[p+1:] {
				b := bs[j]
				gap := b.Min.X - a.Max.X
				if gap > 2*maxTextHeight {
					break // sorted by Min.X: every later box is farther
				}
				ov := min(a.Max.Y, b.Max.Y) - max(a.Min.Y, b.Min.Y)
				if 2*ov < min(a.Dy(), b.Dy()) && !mark(a, b) {
					continue
				}
				if gap <= limit(i, j) && (alike == nil || alike(i, j)) {
					if ra, rb := find(i), find(j); ra != rb {
						parent[ra] = rb
					}
				}
			}
		}
	}
	out, members := unite(len(bs), find, func(i int) image.Rectangle { return bs[i] })
	sort.Sort(byMinX{out, members})
	return out, members
}

// byMinX sorts united boxes and their members together.
type byMinX struct {
	boxes   []image.Rectangle
	members [][]int
}

func (s byMinX) Len() int           { return len(s.boxes) }
func (s byMinX) Less(i, j int) bool { return s.boxes[i].Min.X < s.boxes[j].Min.X }
func (s byMinX) Swap(i, j int) {
	s.boxes[i], s.boxes[j] = s.boxes[j], s.boxes[i]
	s.members[i], s.members[j] = s.members[j], s.members[i]
}

// unite answers the bounding box of each set of n parts, the set of part i
// named by root(i), and the parts of each.
func unite(n int, root func(int) int, box func(int) image.Rectangle) ([]image.Rectangle, [][]int) {
	index := make([]int32, n) // root -> its set's number + 1
	var out []image.Rectangle
	var members [][]int
	for i := 0; i < n; i++ {
		r := root(i)
		k := int(index[r]) - 1
		if k < 0 {
			k = len(out)
			index[r] = int32(k + 1)
			out = append(out, box(i))
			members = append(members, nil)
		}
		out[k] = out[k].Union(box(i))
		members[k] = append(members[k], i)
	}
	return out, members
}

// cursor reports whether blob b is a text cursor (or a box-drawing block):
// a rectangle about one character cell in size whose whole edge is of one
// colour, not the colour around it, hollow or filled. Letters leave
// background at their edges ("0" and "O" at the corners, "e" beside its
// bowl).
func cursor(px []uint32, w, h int, b image.Rectangle) bool {
	if b.Dy() < 8 || b.Dy() > 40 || b.Dx() < 3 || b.Dx() > b.Dy() {
		return false
	}
	c := px[b.Min.Y*w+b.Min.X]
	if ring := b.Inset(-1); ring.In(image.Rect(0, 0, w, h)) && similar(px[ring.Min.Y*w+ring.Min.X], c) {
		return false // the edge is the colour around it: not drawn
	}
	for x := b.Min.X; x < b.Max.X; x++ {
		if !similar(px[b.Min.Y*w+x], c) || !similar(px[(b.Max.Y-1)*w+x], c) {
			return false
		}
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		if !similar(px[y*w+b.Min.X], c) || !similar(px[y*w+b.Max.X-1], c) {
			return false
		}
	}
	return true
}

// Pieces longer than this many times their height are read in two halves.
const longPiece = 24

// halves cuts a long group in two at the word gap nearest its middle: a
// run of columns of the group's background at least 3/5 of its height wide
// (a space; the gap beside a dot in "10.0.2.15" is narrower). A group
// without one stays whole.
func halves(px []uint32, w, h int, g image.Rectangle) []image.Rectangle {
	if g.Dx() < longPiece*g.Dy() {
		return []image.Rectangle{g}
	}
	bg := ground(px, w, h, g)
	clear := func(x int) bool {
		for y := g.Min.Y; y < g.Max.Y; y++ {
			if !similar(px[y*w+x], bg) {
				return false
			}
		}
		return true
	}
	mid, need := (g.Min.X+g.Max.X)/2, max(4, g.Dy()*3/5)
	best, bestAt := -1, 0
	for x := g.Min.X; x < g.Max.X; {
		if !clear(x) {
			x++
			continue
		}
		e := x + 1
		for e < g.Max.X && clear(e) {
			e++
		}
		if c := (x + e) / 2; e-x >= need && (best < 0 || abs(c-mid) < abs(bestAt-mid)) {
			best, bestAt = x, c
		}
		x = e
	}
	if best < 0 {
		return []image.Rectangle{g}
	}
	left := image.Rect(g.Min.X, g.Min.Y, bestAt, g.Max.Y)
	right := image.Rect(bestAt, g.Min.Y, g.Max.X, g.Max.Y)
	return []image.Rectangle{left, right}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
