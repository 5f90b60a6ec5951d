package ocr

import (
	"context"
	"image"
	"strings"
	"unicode"

	"github.com/cespare/xxhash/v2"
)

// Choosing the script of each word. Latin and Cyrillic share look-alike
// letters (A and А, o and о, y and у); a font draws many of them alike,
// and tesseract reading rus+eng answers "BusyBox" as "ВизуВох" when the
// Russian model wins a word of Latin capitals. An agent greps the answer,
// so each word must come out in one script, its own:
//
//   - a word with letters only one script has (b, d, s; д, ж, и) is of
//     that script, and its look-alikes are read in it;
//   - a word of look-alikes only ("OK", "сухо", "copy") takes the script of
//     the nearest word on its line that has one, else of the screen's
//     most words, else Latin;
//   - a tesseract word whose script is not its line's is read again by
//     the other script's model alone, and the better read kept (reader.go);
//   - and what still mixes two scripts has its minority letters replaced by
//     their look-alikes in the majority's, where they have one.
//
// A word of look-alikes in a line of the other script ("copy" in a Russian
// sentence) cannot be told from its pixels: it takes its line's script.

type script uint8

const (
	neutral script = iota // digits, punctuation, anything else
	latin
	cyrillic
	both // a word to read again in each script
)

func scriptOf(r rune) script {
	switch {
	case r < 0x80:
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return latin
		}
		return neutral
	case unicode.Is(unicode.Latin, r):
		return latin
	case unicode.Is(unicode.Cyrillic, r):
		return cyrillic
	}
	return neutral
}

// Letters of one script drawn like one of the other in most fonts, both
// ways: the look-alikes.
var visualPairs = []string{
	"AА", "BВ", "CС", "EЕ", "HН", "KК", "MМ", "OО", "PР", "TТ", "XХ", "YУ",
	"aа", "cс", "eе", "oо", "pр", "xх", "yу", "ëё", "ËЁ",
}

// lookAlike maps each letter with a look-alike in the other script to it,
// and the letters tesseract's models confuse across the scripts (the
// Russian model reads Latin small caps and capitals as these: "BusyBox"
// as "ВизуВох", "OK" as "ок"), for folding a stray letter into its word's
// script.
var lookAlike = pairMap(append(visualPairs, "kк", "mм", "nп", "uи", "rг", "hн", "bь", "tт", "Nи", "sз"))

// visual holds the letters with a look-alike: a word made of these alone
// says nothing of its script.
var visual = pairMap(visualPairs)

func pairMap(pairs []string) map[rune]rune {
	m := map[rune]rune{}
	for _, p := range pairs {
		r := []rune(p)
		if _, ok := m[r[0]]; !ok {
			m[r[0]] = r[1]
		}
		if _, ok := m[r[1]]; !ok {
			m[r[1]] = r[0]
		}
	}
	return m
}

// draftWord is a word before its script is chosen: for each character,
// what it may be (several where the atlas knows look-alikes).
type draftWord struct {
	box   image.Rectangle
	cands [][]rune
	conf  float64
	grid  bool // read from the atlas: exact, only look-alikes to choose
	runs  []letterRun
}

// letterRun is a stretch of a word's characters that may be letters
// ("Windows-версия" has two): the unit a script is chosen for.
type letterRun struct {
	from, to int // cands[from:to]
	lat, cyr int // characters that can only be a Latin, a Cyrillic letter
	letters  bool
	script   script
}

func canBeLetter(c []rune) bool {
	for _, r := range c {
		if scriptOf(r) != neutral {
			return true
		}
	}
	return false
}

// split finds w's letter runs and what each one's own letters say.
func (w *draftWord) split() {
	w.runs = w.runs[:0]
	for i := 0; i < len(w.cands); {
		if !canBeLetter(w.cands[i]) {
			i++
			continue
		}
		run := letterRun{from: i}
		for ; i < len(w.cands) && canBeLetter(w.cands[i]); i++ {
			c := w.cands[i]
			s := scriptOf(c[0])
			one := s != neutral
			for _, r := range c[1:] {
				one = one && scriptOf(r) == s
			}
			if _, alike := visual[c[0]]; !w.grid && alike {
				// tesseract's letter, which has a look-alike: either
				// script's model may have answered it (the atlas's
				// look-alikes come as two candidates instead).
				one = false
			}
			switch {
			case one && s == latin:
				run.lat++
			case one && s == cyrillic:
				run.cyr++
			}
			if one {
				run.letters = true
			}
		}
		run.to = i
		switch {
		case run.lat > run.cyr:
			run.script = latin
		case run.cyr > run.lat:
			run.script = cyrillic
		}
		w.runs = append(w.runs, run)
	}
}

// script answers the script most of w's decided runs are in.
func (w *draftWord) script() script {
	n := map[script]int{}
	for _, r := range w.runs {
		n[r.script] += r.to - r.from
	}
	switch {
	case n[latin] > n[cyrillic]:
		return latin
	case n[cyrillic] > n[latin]:
		return cyrillic
	}
	return neutral
}

// chooseScripts decides every letter run's script: its own letters', else
// its word's, else its line's nearest word's, else the nearest word's on
// its screen row (a group of its own: "OK" three spaces before "Apply"),
// else the screen's majority, else Latin.
func chooseScripts(lines [][]*draftWord) {
	total := map[script]int{}
	boxes := make([]image.Rectangle, len(lines))
	for i, l := range lines {
		for _, w := range l {
			w.split()
			total[w.script()]++
			boxes[i] = boxes[i].Union(w.box)
		}
	}
	screen := latin
	if total[cyrillic] > total[latin] {
		screen = cyrillic
	}
	// onRow answers the script of the nearest decided word on line i's
	// row, in other lines, not farther than 40 line heights.
	onRow := func(i int) script {
		b := boxes[i]
		mid := (b.Min.Y + b.Max.Y) / 2
		best, bestGap := neutral, 40*max(b.Dy(), 1)
		for j, l := range lines {
			o := boxes[j]
			if j == i || mid < o.Min.Y || mid >= o.Max.Y {
				continue
			}
			for _, w := range l {
				gap := max(w.box.Min.X-b.Max.X, b.Min.X-w.box.Max.X)
				if s := w.script(); s != neutral && gap < bestGap {
					best, bestGap = s, gap
				}
			}
		}
		return best
	}
	for i, l := range lines {
		scripts := make([]script, len(l))
		for k, w := range l {
			scripts[k] = w.script()
		}
		row := neutral
		rowDone := false
		for k, w := range l {
			fallback := scripts[k]
			for d := 1; fallback == neutral && d < len(l); d++ {
				if k-d >= 0 && scripts[k-d] != neutral {
					fallback = scripts[k-d]
				} else if k+d < len(l) && scripts[k+d] != neutral {
					fallback = scripts[k+d]
				}
			}
			if fallback == neutral && w.hasUndecided() {
				if !rowDone {
					row, rowDone = onRow(i), true
				}
				fallback = row
			}
			if fallback == neutral {
				fallback = screen
			}
			for j := range w.runs {
				if w.runs[j].script == neutral {
					w.runs[j].script = fallback
				}
			}
		}
	}
}

// hasUndecided reports whether a letter run of w has no script yet.
func (w *draftWord) hasUndecided() bool {
	for _, r := range w.runs {
		if r.script == neutral {
			return true
		}
	}
	return false
}

// text answers w's characters, each letter run in its script: of
// look-alikes, the one of the run's script; of a letter and a digit drawn
// alike (З and 3), the letter in a run with letters that can only be
// letters, else the digit. In a word tesseract read, a letter of the
// other script becomes its look-alike, where it has one.
func (w *draftWord) text() string {
	var b strings.Builder
	run := 0
	for i, c := range w.cands {
		for run < len(w.runs) && w.runs[run].to <= i {
			run++
		}
		pick := c[0]
		if run == len(w.runs) || i < w.runs[run].from {
			b.WriteRune(pick) // not a letter
			continue
		}
		lr := w.runs[run]
		if len(c) > 1 {
			var digit rune
			found := false
			for _, r := range c {
				if unicode.IsDigit(r) {
					digit = r
				}
				if !found && scriptOf(r) == lr.script {
					pick, found = r, true
				}
			}
			if digit != 0 && (!lr.letters || !found) {
				pick = digit
			}
		}
		if s := scriptOf(pick); !w.grid && s != neutral && s != lr.script {
			if alt, ok := lookAlike[pick]; ok && scriptOf(alt) == lr.script {
				pick = alt
			}
		}
		b.WriteRune(pick)
	}
	return b.String()
}

// letters counts s's Latin and Cyrillic letters; strong counts only
// those with no look-alike in the other script.
func letters(s string, strong bool) (lat, cyr int) {
	for _, r := range s {
		if _, alike := visual[r]; strong && alike {
			continue
		}
		switch scriptOf(r) {
		case latin:
			lat++
		case cyrillic:
			cyr++
		}
	}
	return lat, cyr
}

// mixed reports whether s has letters of both scripts.
func mixed(s string) bool {
	lat, cyr := letters(s, false)
	return lat > 0 && cyr > 0
}

// wordScript answers the script most of s's letters are in (neutral: no
// letters, or as many of each).
func wordScript(s string) script {
	lat, cyr := letters(s, false)
	switch {
	case lat > cyr:
		return latin
	case cyr > lat:
		return cyrillic
	}
	return neutral
}

// strongScript answers the script of text's letters that have no
// look-alike (neutral: none, or some of each: mixed reports that).
func strongScript(text string) (s script, mixedScripts bool) {
	lat, cyr := letters(text, true)
	switch {
	case lat > 0 && cyr > 0:
		return neutral, true
	case lat > 0:
		return latin, false
	case cyr > 0:
		return cyrillic, false
	}
	return neutral, false
}

// suspects answers, for the words tesseract read on each line, which to
// read again and in which script (neutral: none): a word of letters of
// both scripts (in its line's script, else in each), a word whose script
// is not that of most of its line's words (two words at least, two thirds
// of them) and the only one of its own, where a row's other lines count
// as its line, and a word alone (in each).
func suspects(lines [][]*draftWord, boxes []image.Rectangle, grounds []uint32) [][]script {
	out := make([][]script, len(lines))
	for i, l := range lines {
		out[i] = make([]script, len(l))
		count := map[script]int{}
		tally := func(ws []*draftWord) {
			for _, w := range ws {
				if s, mixedScripts := strongScript(w.plain()); !mixedScripts && s != neutral {
					count[s]++
				}
			}
		}
		tally(l)
		b := boxes[i]
		mid := (b.Min.Y + b.Max.Y) / 2
		for j, o := range lines {
			if ob := boxes[j]; j != i && mid >= ob.Min.Y && mid < ob.Max.Y && max(ob.Min.X-b.Max.X, b.Min.X-ob.Max.X) < 40*max(b.Dy(), 1) && similar(grounds[i], grounds[j]) {
				tally(o)
			}
		}
		major := neutral
		for _, s := range []script{latin, cyrillic} {
			if count[s] >= 2 && 3*count[s] >= 2*(count[latin]+count[cyrillic]) {
				major = s
			}
		}
		for k, w := range l {
			if w.grid {
				continue
			}
			s, mixedScripts := strongScript(w.plain())
			switch {
			case mixedScripts && major != neutral:
				out[i][k] = major
			case mixedScripts:
				out[i][k] = both
			case s != neutral && major != neutral && s != major && count[s] <= 1:
				out[i][k] = major
			case s != neutral && count[latin]+count[cyrillic] <= 1:
				// A word alone ("Name:" beside an empty entry): nothing
				// tells its script but the two models' answers.
				out[i][k] = both
			}
		}
	}
	return out
}

// plain answers w's first candidates, as tesseract read them.
func (w *draftWord) plain() string {
	var b strings.Builder
	for _, c := range w.cands {
		b.WriteRune(c[0])
	}
	return b.String()
}

// preferScript is the confidence an answer in the script a word should
// be in gets over one in the other script.
const preferScript = 6

// languageScripts maps the tesseract languages poligon knows the script of
// to it.
var languageScripts = map[string]script{
	"eng": latin, "deu": latin, "fra": latin, "spa": latin, "ita": latin, "por": latin, "nld": latin,
	"pol": latin, "ces": latin, "slk": latin, "swe": latin, "nor": latin, "dan": latin, "fin": latin,
	"hun": latin, "ron": latin, "tur": latin, "lav": latin, "lit": latin, "est": latin, "hrv": latin,
	"rus": cyrillic, "ukr": cyrillic, "bel": cyrillic, "bul": cyrillic, "srp": cyrillic, "mkd": cyrillic, "kaz": cyrillic,
}

// scriptLanguages answers, for langs ("rus+eng"), the first language of
// each script, when it has both Latin and Cyrillic ones (else there is no
// script to choose: nil).
func scriptLanguages(langs string) map[script]string {
	out := map[script]string{}
	for _, l := range strings.Split(langs, "+") {
		if s, ok := languageScripts[l]; ok {
			if _, have := out[s]; !have {
				out[s] = l
			}
		}
	}
	if out[latin] == "" || out[cyrillic] == "" {
		return nil
	}
	return out
}

// alike reports whether a and b are the same letters but for look-alikes
// of the two scripts (and tesseract's confusions across them).
func alike(a, b string) bool {
	ra, rb := []rune(a), []rune(b)
	if len(ra) != len(rb) || a == b {
		return false
	}
	for i := range ra {
		if ra[i] != rb[i] && lookAlike[ra[i]] != rb[i] && lookAlike[rb[i]] != ra[i] {
			return false
		}
	}
	return true
}

// reread reads again, in one script, the words tesseract answered in the
// other script than their line's, or in both (suspects, script.go), and
// keeps the answer it is surer of.
func (r *Reader) reread(ctx context.Context, groups []groupResult, img *image.RGBA, px []uint32, page *Page) error {
	langs := scriptLanguages(r.cfg.Languages)
	if langs == nil {
		return nil
	}
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	var lines [][]*draftWord
	var boxes []image.Rectangle
	var grounds []uint32
	for _, g := range groups {
		for _, l := range g.lines {
			lines, boxes, grounds = append(lines, l), append(boxes, g.box), append(grounds, g.ground)
		}
	}
	type again struct {
		word   *draftWord
		prefer script // the line's script, or both
		jobs   []*job
	}
	var todo []again
	var jobs []*job
	cached := map[*job][]Word{}
	for i, sus := range suspects(lines, boxes, grounds) {
		for k, s := range sus {
			if s == neutral {
				continue
			}
			wd := lines[i][k]
			g := boxes[i]
			box := image.Rect(wd.box.Min.X-2, g.Min.Y, wd.box.Max.X+2, g.Max.Y).Intersect(image.Rect(0, 0, w, h))
			a := again{word: wd, prefer: s}
			for _, t := range []script{latin, cyrillic} {
				if s != t && s != both {
					continue
				}
				key := cropKey(img, box) ^ xxhash.Sum64String(langs[t])
				j := &job{key: key, langs: langs[t]}
				a.jobs = append(a.jobs, j)
				if ws, ok := r.cache.get(key); ok {
					cached[j] = place(ws, box.Min)
					continue
				}
				j.crop = prepare(px, w, h, box, max(2, scaleFor(g.Dy())))
				jobs = append(jobs, j)
			}
			todo = append(todo, a)
		}
	}
	if err := r.recognise(ctx, jobs); err != nil {
		return err
	}
	for _, a := range todo {
		// The surest answer, where the one in the line's script (else
		// Latin: the Russian model reads Latin capitals as Cyrillic
		// with confidence, the English one reads Russian as garbage)
		// counts a little more: two models reading the same shapes in
		// two scripts ("ог" and "or", "Мате:" and "Name:") are as sure.
		prefer := a.prefer
		if prefer == both {
			prefer = latin
		}
		score := func(text string, conf float64) float64 {
			if wordScript(text) == prefer {
				return conf + preferScript
			}
			return conf
		}
		best, conf := "", a.word.conf
		top := score(a.word.plain(), conf)
		for _, j := range a.jobs {
			ws, ok := cached[j]
			if !ok {
				rel := j.crop.toFrame(j.words)
				r.cache.put(j.key, rel)
				ws = place(rel, j.crop.origin)
				page.Read++
			}
			if len(ws) != 1 {
				continue
			}
			if s, mixedScripts := strongScript(ws[0].Text); !mixedScripts && s != languageScripts[j.langs] && s != neutral {
				continue
			}
			if sc := score(ws[0].Text, ws[0].Conf); sc > top {
				best, conf, top = ws[0].Text, ws[0].Conf, sc
			}
		}
		if best != "" {
			a.word.cands, a.word.conf = nil, conf
			for _, c := range best {
				a.word.cands = append(a.word.cands, []rune{c})
			}
		}
	}
	return nil
}
