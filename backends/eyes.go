package backends

import (
	"errors"
	"image"
	"time"
)

// The eyes: capabilities that read a frame instead of driving a machine.
// backends/ocr reads a frame's text and backends/vision lists its UI
// elements with a model; hostapi declares the interfaces it uses, and what
// they answer is declared here, so neither side imports the other.

// TextPage is what a frame reads as.
type TextPage struct {
	Lines  []TextLine
	Read   int           // pieces recognised by a model for this frame (equal pieces once)
	Cached int           // pieces answered from a cache
	Grid   int           // pieces read cell by cell from an atlas of glyphs
	Took   time.Duration // the whole read
}

// TextLine is a word group read on screen: words close together on one
// baseline over one background. Boxes are in frame pixels.
type TextLine struct {
	Box      image.Rectangle
	Text     string
	Conf     float64 // the recogniser's mean word confidence, 0-100
	Selected bool    // on a highlight bar: a selected row, a menu item
	Words    []TextWord
}

// Centre answers the middle of the line's box.
func (l TextLine) Centre() image.Point {
	return image.Pt((l.Box.Min.X+l.Box.Max.X)/2, (l.Box.Min.Y+l.Box.Max.Y)/2)
}

// TextWord is one word of a line.
type TextWord struct {
	Box  image.Rectangle
	Text string
	Conf float64
}

// Element is one UI element a model listed; X, Y is its centre in the
// pixels of the frame passed in.
type Element struct {
	X, Y  int
	Type  string // button, link, field, checkbox, radio, tab, menu, menuitem, list item, icon, text, window, other
	Label string // screen text, cleaned of control characters, at most 200 runes
}

// ElementList is a model's element list for one frame.
type ElementList struct {
	Elements []Element
	// Complete is false when the answer was capped or unparseable: such a
	// list is never cached nor served as complete.
	Complete bool
	Problem  string        // "capped" | "unparseable" | ""
	Took     time.Duration // the model call
}

var (
	// ErrOCRUnavailable wraps every reason OCR cannot run on this machine
	// or in this build; the error's text names what is missing.
	ErrOCRUnavailable = errors.New("OCR is unavailable")
	// ErrNoPoint: a grounding model answered no point for a label (none,
	// or one outside the image).
	ErrNoPoint = errors.New("the grounding model gave no point")
)
