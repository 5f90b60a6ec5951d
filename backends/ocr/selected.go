package ocr

import "image"

// A selected row (a list or menu selection, a highlighted line, a focused
// button) is text on a bar: a band of one colour, a line or two tall,
// with other colours above and below it (a clean edge: rows mostly of
// another colour), and text either lighter than the bar (white on blue)
// or of the colour around it (reverse video). A dark terminal is not a
// bar: its colour goes on for many lines; nor is the console's ground
// beside a "[" (text rows above and below, no clean edge), nor a line on a
// screen-wide colour ("Package configuration" on a blue console: the band
// reaches the screen's top). A grey button with black text in a white
// dialog is neither lighter nor reversed.
//
// And a selection stands among other text: some text near it (above,
// below or beside it) is on another ground. A title bar has text below
// it, none above, and is as wide as that text: it is a title, not a
// selection (twm's and a menu's titles; a list's first row, selected, with
// nothing above it, is taken for a title too).

// bar is the band of colour a group stands on.
type bar struct {
	box    image.Rectangle
	colour uint32
	lit    bool // the text is lighter than the band, or of the colour around it
}

// barOf answers the band group g stands on, if it stands on one.
func barOf(px []uint32, w, h int, g image.Rectangle) (bar, bool) {
	c := ground(px, w, h, g)
	// The ink: the colour farthest from the ground.
	far, ink := 0, c
	for y := g.Min.Y; y < g.Max.Y; y++ {
		for _, p := range px[y*w+g.Min.X : y*w+g.Max.X] {
			if d := distance(p, c); d > far {
				far, ink = d, p
			}
		}
	}
	// Across: along a row of the band beside the text (above it, else
	// below), as far as the band's colour goes.
	share := func(y, x0, x1 int) int { return rowShare(px[y*w+x0:y*w+x1], c) }
	pad := -1
	for _, y := range []int{g.Min.Y - 1, g.Max.Y} {
		if y >= 0 && y < h && share(y, g.Min.X, g.Max.X) >= 80 {
			pad = y
			break
		}
	}
	if pad < 0 {
		return bar{}, false
	}
	x0, x1 := g.Min.X, g.Max.X
	for x0 > 0 && similar(px[pad*w+x0-1], c) {
		x0--
	}
	for x1 < w && similar(px[pad*w+x1], c) {
		x1++
	}
	// Down and up: rows mostly of the band's colour.
	tallest := 2*g.Dy() + 8
	top, bottom := g.Min.Y, g.Max.Y
	for top > 0 && share(top-1, x0, x1) >= 90 {
		if top--; g.Max.Y-top > tallest {
			return bar{}, false
		}
	}
	for bottom < h && share(bottom, x0, x1) >= 90 {
		if bottom++; bottom-top > tallest {
			return bar{}, false
		}
	}
	if top == 0 || bottom == h || share(top-1, x0, x1) > 25 || share(bottom, x0, x1) > 25 {
		return bar{}, false // no clean edge: text in a region, not on a band
	}
	b := bar{box: image.Rect(x0, top, x1, bottom), colour: c}
	around := func(y int) bool { return rowShare(px[y*w+x0:y*w+x1], ink) > 50 } // the row is mostly the ink's colour
	b.lit = luma(ink) > luma(c) || around(top-1) || around(bottom)
	return b, true
}

// selections marks the groups that stand on a lit bar among text on
// other grounds, and are no title.
func selections(gs []groupResult) {
	for i := range gs {
		g := &gs[i]
		g.selected = false
		if !g.onBar || !g.bar.lit {
			continue
		}
		b := g.bar.box
		near := g.box.Dy() * 3 / 2
		var above, below, beside bool
		widest := 0
		for j, o := range gs {
			if j == i || similar(o.ground, g.bar.colour) || o.box.Max.X <= b.Min.X && !sameRow(o.box, g.box) || o.box.Min.X >= b.Max.X && !sameRow(o.box, g.box) {
				continue
			}
			switch {
			case sameRow(o.box, g.box):
				beside = beside || abs(o.box.Min.X-g.box.Min.X) < 40*g.box.Dy()
			case o.box.Max.Y <= b.Min.Y+2 && o.box.Max.Y >= b.Min.Y-near:
				above = true
			case o.box.Min.Y >= b.Max.Y-2 && o.box.Min.Y <= b.Max.Y+near:
				below = true
				widest = max(widest, o.box.Dx())
			}
		}
		title := !above && below && 5*b.Dx() >= 4*widest
		g.selected = (above || below || beside) && !title
	}
}

// sameRow reports whether a and b share half the smaller one's rows.
func sameRow(a, b image.Rectangle) bool {
	ov := min(a.Max.Y, b.Max.Y) - max(a.Min.Y, b.Min.Y)
	return 2*ov >= min(a.Dy(), b.Dy())
}

// luma is a colour's brightness, 0-255.
func luma(c uint32) int {
	return (299*int(c>>16&0xff) + 587*int(c>>8&0xff) + 114*int(c&0xff)) / 1000
}

// rowShare answers the percent of row's pixels (every other one) of colour
// c.
func rowShare(row []uint32, c uint32) int {
	n, all := 0, 0
	for i := 0; i < len(row); i += 2 {
		all++
		if similar(row[i], c) {
			n++
		}
	}
	return 100 * n / max(all, 1)
}
