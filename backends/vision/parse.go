package vision

import (
	"image"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const maxLabel = 200 // runes

// mapper maps a model's coordinates (pixels of the sent image, or 0-1000 of
// it) back to the pixels of the frame.
type mapper struct {
	min        image.Point // the frame's origin: a SubImage answers points of its parent
	w, h       int         // the frame's size
	limX, limY float64     // the answer's range: the sent size, or 1000
}

func (c *Client) mapper(frame *image.RGBA, sw, sh int) mapper {
	b := frame.Bounds()
	m := mapper{min: b.Min, w: b.Dx(), h: b.Dy(), limX: float64(sw), limY: float64(sh)}
	if c.ep.Coords == CoordsPermille {
		m.limX, m.limY = 1000, 1000
	}
	return m
}

func (m mapper) to(x, y float64) image.Point {
	px := int(math.Round(x * float64(m.w) / m.limX))
	py := int(math.Round(y * float64(m.h) / m.limY))
	return image.Pt(min(max(px, 0), m.w-1)+m.min.X, min(max(py, 0), m.h-1)+m.min.Y)
}

// point maps a grounding answer: strictly inside the range (its edge, which
// some models emit for 1000, is clamped to the last pixel).
func (m mapper) point(x, y float64) (image.Point, bool) {
	if x < 0 || y < 0 || x > m.limX || y > m.limY {
		return image.Point{}, false
	}
	return m.to(x, y), true
}

// element maps a listed element: a model overshoots the edges a little, so
// up to 10% beyond the range is clamped; further out the line is wrong.
func (m mapper) element(x, y float64) (image.Point, bool) {
	if x < 0 || y < 0 || x > 1.1*m.limX || y > 1.1*m.limY {
		return image.Point{}, false
	}
	return m.to(x, y), true
}

// stripThinking removes <think>...</think> blocks. A block the template
// opened (the answer starts inside it, "...</think>answer") is dropped up to
// its end; an unterminated one is dropped to the end of the text, and then
// open is true: the text was cut inside thoughts, not inside the answer.
func stripThinking(s string) (text string, open bool) {
	if k := strings.Index(s, "</think>"); k >= 0 && !strings.Contains(s[:k], "<think>") {
		s = s[k+len("</think>"):]
	}
	for {
		i := strings.Index(s, "<think>")
		if i < 0 {
			return s, false
		}
		j := strings.Index(s[i:], "</think>")
		if j < 0 {
			return s[:i], true
		}
		s = s[:i] + s[i+j+len("</think>"):]
	}
}

// parsed is what parseList made of an answer.
type parsed struct {
	elements  []Element
	good      int // well-formed lines, repeats included
	malformed int
	repeated  int // well-formed lines that repeated an earlier element (a looping model)
}

// unparseable: a non-blank answer of which no line, or not even half of the
// lines, could be read.
func (p parsed) unparseable(answer string) bool {
	if strings.TrimSpace(answer) == "" {
		return false // the model saw nothing to list
	}
	return p.good == 0 || p.malformed > p.good
}

var multiSpace = regexp.MustCompile(`\s{2,}`)

// parseList reads x<TAB>y<TAB>type<TAB>label lines. It skips code fences,
// a header line and table rules; accepts tabs, runs of 2+ spaces, pipe
// tables and (with a known type) single spaces as separators; drops the last
// line of an answer cut at the cap (it may end mid-label); and keeps each
// element once.
func parseList(answer string, capped bool, m mapper) parsed {
	text, open := stripThinking(answer)
	lines := strings.Split(text, "\n")
	if capped && !open && !strings.HasSuffix(text, "\n") {
		lines = lines[:len(lines)-1]
	}
	var p parsed
	seen := make(map[Element]bool)
	for _, line := range lines {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "```") || isTableRule(l) {
			continue
		}
		f := splitFields(l)
		if len(f) >= 2 && strings.EqualFold(f[0], "x") && strings.EqualFold(f[1], "y") {
			continue // a header
		}
		el, ok := parseLine(f, m)
		if !ok {
			p.malformed++
			continue
		}
		p.good++
		if seen[el] {
			p.repeated++
			continue
		}
		seen[el] = true
		p.elements = append(p.elements, el)
	}
	return p
}

func isTableRule(l string) bool {
	return strings.HasPrefix(l, "|") && strings.Trim(l, "|-: ") == ""
}

// splitFields cuts a line into x, y, type and label.
func splitFields(l string) []string {
	for _, bullet := range []string{"- ", "* ", "• "} { // not a bare "-": a negative x
		l = strings.TrimSpace(strings.TrimPrefix(l, bullet))
	}
	var f []string
	switch {
	case strings.HasPrefix(l, "|"):
		f = strings.Split(strings.Trim(l, "|"), "|")
	case strings.Contains(l, "\t"):
		f = strings.Split(l, "\t")
	case multiSpace.MatchString(l):
		f = multiSpace.Split(l, -1)
	default:
		// "512 300 button Save As": only with a known type, which pins
		// where the label starts.
		w := strings.Fields(l)
		if len(w) < 3 {
			return w
		}
		if len(w) >= 4 {
			if _, ok := normType(w[2] + " " + w[3]); ok {
				return append([]string{w[0], w[1], w[2] + " " + w[3]}, strings.Join(w[4:], " "))
			}
		}
		if _, ok := normType(w[2]); !ok {
			return nil
		}
		return append([]string{w[0], w[1], w[2]}, strings.Join(w[3:], " "))
	}
	out := f[:0]
	for _, s := range f {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func parseLine(f []string, m mapper) (Element, bool) {
	if len(f) < 3 {
		return Element{}, false
	}
	x, okx := number(f[0])
	y, oky := number(f[1])
	if !okx || !oky {
		return Element{}, false
	}
	pt, ok := m.element(x, y)
	if !ok {
		return Element{}, false
	}
	label := strings.Join(f[3:], " ")
	typ, known := normType(f[2])
	if !known {
		if t, ok := normType(label); ok { // "x y label type": swapped
			typ, label = t, f[2]
		}
	}
	return Element{X: pt.X, Y: pt.Y, Type: typ, Label: cleanText(label, maxLabel)}, true
}

func number(s string) (float64, bool) {
	s = strings.TrimSuffix(strings.TrimSpace(s), "px")
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil && !math.IsInf(v, 0) && !math.IsNaN(v)
}

// The types the prompt asks for, and the words models use for them instead.
var types = map[string]string{
	"button": "button", "link": "link", "field": "field", "checkbox": "checkbox", "radio": "radio",
	"tab": "tab", "menu": "menu", "menuitem": "menuitem", "list item": "list item", "icon": "icon",
	"text": "text", "window": "window", "other": "other",

	"btn": "button", "push button": "button", "toggle button": "button",
	"hyperlink": "link", "url": "link",
	"input": "field", "textbox": "field", "text box": "field", "textfield": "field", "text field": "field",
	"edit": "field", "entry": "field", "search": "field", "search field": "field", "combobox": "field",
	"combo box": "field", "dropdown": "field", "drop down": "field", "spinbox": "field", "password": "field",
	"check box": "checkbox", "check": "checkbox", "switch": "checkbox", "toggle": "checkbox",
	"radio button": "radio", "radiobutton": "radio", "option": "radio",
	"tab item": "tab", "page tab": "tab",
	"menu bar": "menu", "menubar": "menu", "menu item": "menuitem",
	"listitem": "list item", "row": "list item", "item": "list item", "list": "list item", "tree item": "list item",
	"image": "icon", "img": "icon", "logo": "icon",
	"label": "text", "static text": "text", "heading": "text", "title": "text", "paragraph": "text",
	"dialog": "window", "panel": "window", "pane": "window",
}

// normType maps a model's type word to one of the listed types ("other"
// when unknown; ok says whether it was recognised).
func normType(s string) (string, bool) {
	s = strings.ToLower(strings.Trim(strings.TrimSpace(s), "\"'`[]()<>"))
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '_' || r == '-' || unicode.IsSpace(r) }), " ")
	if t, ok := types[s]; ok {
		return t, true
	}
	return "other", false
}

// cleanText makes screen text safe to hand on: valid UTF-8, no control or
// format characters (a bidi override can disguise a label), one space
// between words, no wrapping quotes, at most n runes.
func cleanText(s string, n int) string {
	s = strings.ToValidUTF8(s, "")
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case unicode.IsControl(r) || unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case unicode.Is(unicode.Cf, r):
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	s = b.String()
	for _, q := range []string{`""`, "''", "“”", "«»", "``"} {
		open, size := utf8.DecodeRuneInString(q)
		close := []rune(q[size:])[0]
		if r, _ := utf8.DecodeRuneInString(s); r == open && len(s) > 2*size {
			if l, _ := utf8.DecodeLastRuneInString(s); l == close {
				s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(s, string(open)), string(close)))
				break
			}
		}
	}
	if utf8.RuneCountInString(s) > n {
		s = strings.TrimSpace(string([]rune(s)[:n]))
	}
	return s
}

const num = `(-?\d+(?:\.\d+)?)`

var (
	reJSONObj = regexp.MustCompile(`\{[^{}]*\}`)
	reJSONX   = regexp.MustCompile(`"x"\s*:\s*"?` + num)
	reJSONY   = regexp.MustCompile(`"y"\s*:\s*"?` + num)
	rePointT  = regexp.MustCompile(`<point>\s*` + num + `[\s,]+` + num + `\s*</point>`)
	reBoxTok  = regexp.MustCompile(`<\|box_start\|>\s*\(\s*` + num + `\s*,\s*` + num + `\s*\)\s*,\s*\(\s*` + num + `\s*,\s*` + num + `\s*\)`)
	reBox4    = regexp.MustCompile(`\[\s*` + num + `\s*,\s*` + num + `\s*,\s*` + num + `\s*,\s*` + num + `\s*\]`)
	rePair    = regexp.MustCompile(`[(\[]\s*` + num + `\s*,\s*` + num + `\s*[)\]]`)
	reBare    = regexp.MustCompile(`(?:^|[^\w.\-])` + num + `\s*,\s*` + num + `(?:\W|$)`)
)

// parsePoint finds the first point of a grounding answer — (x, y),
// Click(x, y), [x, y], <point>x y</point>, {"x":..,"y":..}, a bare x,y, or a
// box [x1,y1,x2,y2] / <|box_start|>(x1,y1),(x2,y2) (its centre) — or the last
// one when the text is reasoning (its conclusion comes last). In an answer cut
// at the cap a bare pair at the very end may be cut mid-number and is ignored.
func parsePoint(answer string, last, capped bool) (x, y float64, ok bool) {
	text, _ := stripThinking(answer)
	type cand struct {
		at, end int
		x, y    float64
	}
	var cs []cand
	// add keeps a match unless it lies inside one of a more specific
	// pattern: the pairs inside a box, the bare x,y inside (x, y).
	add := func(at, end int, vals ...string) {
		for _, c := range cs {
			if at < c.end && c.at < end {
				return
			}
		}
		v := make([]float64, len(vals))
		for i, s := range vals {
			var ok bool
			if v[i], ok = number(s); !ok {
				return
			}
		}
		if len(v) == 4 {
			cs = append(cs, cand{at, end, (v[0] + v[2]) / 2, (v[1] + v[3]) / 2})
		} else {
			cs = append(cs, cand{at, end, v[0], v[1]})
		}
	}
	for _, loc := range reJSONObj.FindAllStringIndex(text, -1) {
		obj := text[loc[0]:loc[1]]
		mx, my := reJSONX.FindStringSubmatch(obj), reJSONY.FindStringSubmatch(obj)
		if mx != nil && my != nil {
			add(loc[0], loc[1], mx[1], my[1])
		}
	}
	for _, re := range []*regexp.Regexp{rePointT, reBoxTok, reBox4, rePair} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			vals := make([]string, 0, 4)
			for i := 2; i+1 < len(m); i += 2 {
				vals = append(vals, text[m[i]:m[i+1]])
			}
			add(m[0], m[1], vals...)
		}
	}
	end := len(strings.TrimRight(text, " \t\r\n"))
	for _, m := range reBare.FindAllStringSubmatchIndex(text, -1) {
		if capped && m[5] >= end {
			continue
		}
		add(m[2], m[5], text[m[2]:m[3]], text[m[4]:m[5]])
	}
	if len(cs) == 0 {
		return 0, 0, false
	}
	best := cs[0]
	for _, c := range cs[1:] {
		// The earliest (or latest) wins; overlaps were dropped above.
		if (!last && c.at < best.at) || (last && c.at > best.at) {
			best = c
		}
	}
	return best.x, best.y, true
}
