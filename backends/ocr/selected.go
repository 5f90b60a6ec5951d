package ocr

import "image"

// A selected row (a list or menu selection, a highlighted line) is text on
// a bar: a band of one colour about one line tall, whose colour differs
// from what lies above and below it, with text either lighter than the bar
// (white on blue) or of the colour around the bar (reverse video, light or
// dark). A dark terminal is not a bar: its colour goes on for many lines;
// a grey button with black text in a white dialog is neither.

// onBar answers whether group g (in the frame's colours px, w x h) sits on
// a highlight bar.
func onBar(px []uint32, w, h int, g image.Rectangle) bool {
	bg := ground(px, w, h, g)
	// Text lighter than the bar: the crop's ink (farthest colour) is
	// brighter than its background.
	far, ink := 0, bg
	for y := g.Min.Y; y < g.Max.Y; y++ {
		for _, p := range px[y*w+g.Min.X : y*w+g.Max.X] {
			if d := distance(p, bg); d > far {
				far, ink = d, p
			}
		}
	}
	// The bar's extent: rows mostly of its colour, up and down from the
	// text; beyond it, rows of another colour (a clean edge: little of the
	// bar's colour).
	share := func(y int) int { // percent of the row's pixels of the bar's colour (every other one)
		n, all := 0, 0
		row := px[y*w+g.Min.X : y*w+g.Max.X]
		for i := 0; i < len(row); i += 2 {
			all++
			if similar(row[i], bg) {
				n++
			}
		}
		return 100 * n / max(all, 1)
	}
	tallest := 2*g.Dy() + 8 // taller is a panel, not a bar
	top := g.Min.Y
	for top > 0 && share(top-1) > 50 {
		if top--; g.Max.Y-top > tallest {
			return false
		}
	}
	bottom := g.Max.Y
	for bottom < h && share(bottom) > 50 {
		if bottom++; bottom-top > tallest {
			return false
		}
	}
	if top > 0 && share(top-1) > 25 || bottom < h && share(bottom) > 25 {
		return false // no clean edge: text in a region, not on a bar
	}
	if luma(ink) > luma(bg) {
		return true
	}
	around := func(y int) bool {
		if y < 0 || y >= h {
			return false
		}
		n := 0
		for _, p := range px[y*w+g.Min.X : y*w+g.Max.X] {
			if similar(p, ink) {
				n++
			}
		}
		return 2*n > g.Dx()
	}
	return around(top-1) || around(bottom)
}

// luma is a colour's brightness, 0-255.
func luma(c uint32) int {
	return (299*int(c>>16&0xff) + 587*int(c>>8&0xff) + 114*int(c&0xff)) / 1000
}
