package hostapi

import (
	"fmt"
	"image"
	"sort"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"

	"github.com/poligon/poligon/internal/editdist"
)

// Matching a label an agent or a script asks for against text read on
// screen. OCR and models misread in known ways, so the comparison is made
// on a folded form: compatibility-normalised, case-folded, spaces
// collapsed, the punctuation around it dropped ("Username:" is
// "username"), and Cyrillic letters that look like Latin ones turned into
// those (OCR reads "OK" as "ок" and "Далее" can come back half Latin).
// Then exact beats near, and a label that matches several places equally
// well is an error listing them, never a guess.

// MaxLabelLen bounds a label: longer is a sentence, not something on a
// button.
const MaxLabelLen = 200

// lookalike maps Cyrillic letters to the one Latin letter they look like
// (lowercase, after folding case): the fold turns them into it.
var lookalike = map[rune]rune{
	'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'e', 'к': 'k', 'м': 'm', 'о': 'o',
	'р': 'p', 'с': 'c', 'у': 'y', 'х': 'x', 'і': 'i', 'ј': 'j', 'ѕ': 's',
}

// readAs lists the Latin letters OCR reads a Cyrillic letter for, or as,
// where the fold cannot turn it into one (seen: "garden" read "загдет",
// "drawer" "дгашег", "BusyBox" "ВизуВох"): such a pair costs no edit when
// a label is compared (looksAlike). Latin letters stay themselves: "gas"
// is not "sas".
var readAs = map[rune]string{
	'б': "b", 'г': "r", 'д': "d", 'з': "gs", 'и': "un", 'й': "u", 'л': "n", 'н': "hn",
	'п': "n", 'т': "tmn", 'ц': "u", 'ч': "y", 'ш': "w", 'щ': "w", 'ь': "b",
}

// looksAlike is rune equality for labels: the same letter, or a Cyrillic
// letter and a Latin one it is read as.
func looksAlike(x, y rune) bool {
	return x == y || strings.ContainsRune(readAs[x], y) || strings.ContainsRune(readAs[y], x)
}

// foldLabel is the form labels are compared in.
func foldLabel(s string) string {
	s = norm.NFKC.String(s)
	var b strings.Builder
	space := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if l, ok := lookalike[r]; ok {
			r = l
		}
		b.WriteRune(r)
	}
	return strings.TrimFunc(b.String(), func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSymbol(r) || unicode.IsSpace(r) })
}

// CheckLabel refuses a label that cannot name anything on screen.
func CheckLabel(label string) error {
	switch {
	case strings.TrimSpace(label) == "":
		return Failf("give the text the element shows, e.g. label=\"OK\"", "label is empty")
	case len([]rune(label)) > MaxLabelLen:
		return Failf("give the few words the element shows, not a sentence", "label is %d characters, at most %d", len([]rune(label)), MaxLabelLen)
	case foldLabel(label) == "":
		return Failf("give the text the element shows; punctuation alone matches nothing", "label %q has no letters or digits", label)
	}
	return nil
}

// Spot is a place on screen a label matched.
type Spot struct {
	Box      image.Rectangle
	Text     string // what was read there
	Selected bool
	Kind     string // the element type, when a model said
	distance int    // 0 exact
}

// Centre answers the middle of the spot.
func (s Spot) Centre() image.Point {
	return image.Pt((s.Box.Min.X+s.Box.Max.X)/2, (s.Box.Min.Y+s.Box.Max.Y)/2)
}

// allowed is how many edits a label of n folded runes may be off by.
func allowed(n int) int {
	switch {
	case n >= 8:
		return 2
	case n >= 4:
		return 1
	}
	return 0
}

// candidate is a piece of screen text a label may name.
type candidate struct {
	Spot
	folded string
}

// bestSpots answers the candidates nearest the label: exact matches, else
// those within the allowed edits, nearest first; several spots at the same
// best distance mean the label is ambiguous. Candidates over one place
// (a line and the same words inside it) count once.
func bestSpots(label string, cands []candidate) []Spot {
	want := foldLabel(label)
	limit := allowed(len([]rune(want)))
	best := 2*limit + 2
	var spots []Spot
	for _, c := range cands {
		if c.folded == "" {
			continue
		}
		// rank orders by edits, and a reading through look-alikes after the
		// same reading exactly: "garden" on screen beats "загдет".
		d, rank := 0, 0
		if c.folded != want {
			// Cheap bound first: lengths too far apart cannot match.
			if diff := len([]rune(c.folded)) - len([]rune(want)); diff > limit || -diff > limit {
				continue
			}
			d = editdist.LevenshteinFunc(c.folded, want, looksAlike)
			rank = 2*d + 1
		}
		if d > limit || rank > best {
			continue
		}
		if rank < best {
			best, spots = rank, spots[:0]
		}
		c.distance = d
		spots = appendDistinct(spots, c.Spot)
	}
	return spots
}

// appendDistinct adds s unless a spot over the same place is there.
func appendDistinct(spots []Spot, s Spot) []Spot {
	for i, o := range spots {
		in := o.Box.Intersect(s.Box)
		if !in.Empty() && 2*in.Dx()*in.Dy() >= min(o.Box.Dx()*o.Box.Dy(), s.Box.Dx()*s.Box.Dy()) {
			if s.Box.Dx()*s.Box.Dy() < o.Box.Dx()*o.Box.Dy() {
				spots[i] = s // the tighter box aims better
			}
			return spots
		}
	}
	return append(spots, s)
}

// ambiguous is the error for several equally good spots.
func ambiguous(label, source string, spots []Spot) error {
	sort.Slice(spots, func(i, j int) bool {
		a, b := spots[i].Centre(), spots[j].Centre()
		return a.Y < b.Y || a.Y == b.Y && a.X < b.X
	})
	var lines []string
	for i, s := range spots {
		if i == 8 {
			lines = append(lines, fmt.Sprintf("... and %d more", len(spots)-8))
			break
		}
		c := s.Centre()
		lines = append(lines, fmt.Sprintf("%d,%d %q", c.X, c.Y, s.Text))
	}
	return Failf("give a longer label (the words around it), or click one of these points with ui_click",
		"label %q matches %d places equally well (%s): %s", label, len(spots), source, strings.Join(lines, "; "))
}
