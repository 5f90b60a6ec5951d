package ocr

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/poligon/poligon/internal/editdist"
)

// The accuracy corpus: frames of real guests (testdata/corpus/NAME/
// frame.png) and the text TestCaptureCorpus put on them (truth.txt), in
// regions of monospace ("mono") or proportional ("prop") text. A read is
// scored region by region: the lines read whose middle is in the region,
// row by row (left to right on a row, rows top to bottom), against the
// region's lines, box drawing left out of both and runs of spaces counted
// as one.

type corpusFrame struct {
	name    string
	frame   string // the PNG
	what    string
	regions []region
}

// loadCorpus reads every frame of the corpus.
func loadCorpus(t testing.TB) []corpusFrame {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(corpusDir, "*", "truth.txt"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no corpus in %s", corpusDir)
	}
	sort.Strings(dirs)
	var out []corpusFrame
	for _, truth := range dirs {
		dir := filepath.Dir(truth)
		c := corpusFrame{name: filepath.Base(dir), frame: filepath.Join(dir, "frame.png")}
		f, err := os.Open(truth)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "# "):
				if c.what == "" {
					c.what = l[2:]
				}
			case strings.HasPrefix(l, "frame "):
				c.frame = filepath.Join(dir, l[len("frame "):])
			case strings.HasPrefix(l, "@ "):
				var r region
				if _, err := fmt.Sscanf(l, "@ %s %d %d %d %d", &r.kind, &r.box.Min.X, &r.box.Min.Y, &r.box.Max.X, &r.box.Max.Y); err != nil {
					t.Fatalf("%s: %q: %v", truth, l, err)
				}
				c.regions = append(c.regions, r)
			default:
				if len(c.regions) == 0 {
					t.Fatalf("%s: text before the first region", truth)
				}
				r := &c.regions[len(c.regions)-1]
				r.lines = append(r.lines, l)
			}
		}
		f.Close()
		out = append(out, c)
	}
	return out
}

// score is what a read of a frame (or a corpus) came to.
type score struct {
	chars, charErrors int // truth characters, edits to make the read of them
	words, wordsFound int // truth words, those read (punctuation aside)
	crossScript       int // words read with a letter of the other script
	diffs             []string
}

func (s *score) add(o score) {
	s.chars += o.chars
	s.charErrors += o.charErrors
	s.words += o.words
	s.wordsFound += o.wordsFound
	s.crossScript += o.crossScript
	s.diffs = append(s.diffs, o.diffs...)
}

func (s score) charAccuracy() float64 {
	if s.chars == 0 {
		return 1
	}
	return 1 - float64(s.charErrors)/float64(s.chars)
}

func (s score) wordRecall() float64 {
	if s.words == 0 {
		return 1
	}
	return float64(s.wordsFound) / float64(s.words)
}

// frameChar reports box drawing and blocks, which are frame, not text.
func frameChar(r rune) bool { return r >= 0x2500 && r <= 0x259f }

// normalise leaves out box drawing and counts runs of spaces as one.
func normalise(s string) string {
	s = strings.Map(func(r rune) rune {
		if frameChar(r) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}

// scoreRegions scores page's lines against the regions of kind ("" all).
func scoreRegions(p Page, regions []region, kind string) score {
	var total score
	for _, reg := range regions {
		if kind != "" && reg.kind != kind {
			continue
		}
		var truth []string
		for _, l := range reg.lines {
			if n := normalise(l); n != "" {
				truth = append(truth, n)
			}
		}
		var in []Line
		for _, l := range p.Lines {
			if l.Centre().In(reg.box) {
				in = append(in, l)
			}
		}
		read := rows(in)
		total.add(compare(strings.Join(read, "\n"), strings.Join(truth, "\n")))
	}
	return total
}

// rows joins lines into screen rows: a line whose middle is within half
// the row's first line's height of that line's middle is on its row.
func rows(ls []Line) []string {
	sort.Slice(ls, func(i, j int) bool { return ls[i].Centre().Y < ls[j].Centre().Y })
	var out []string
	for i := 0; i < len(ls); {
		first := ls[i]
		j := i + 1
		for j < len(ls) && ls[j].Centre().Y-first.Centre().Y <= max(first.Box.Dy(), 1)/2 {
			j++
		}
		row := append([]Line(nil), ls[i:j]...)
		sort.Slice(row, func(a, b int) bool { return row[a].Box.Min.X < row[b].Box.Min.X })
		var texts []string
		for _, l := range row {
			texts = append(texts, l.Text)
		}
		if n := normalise(strings.Join(texts, " ")); n != "" {
			out = append(out, n)
		}
		i = j
	}
	return out
}

// compare scores the read text of a region against its truth.
func compare(read, truth string) score {
	s := score{chars: len([]rune(truth))}
	s.charErrors = editdist.Levenshtein(read, truth)
	readWords := map[string]int{}
	for _, w := range strings.Fields(read) {
		readWords[bare(w)]++
	}
	for _, w := range strings.Fields(truth) {
		if w = bare(w); w == "" {
			continue
		}
		s.words++
		if readWords[w] > 0 {
			readWords[w]--
			s.wordsFound++
		}
	}
	rt, tt := strings.Fields(read), strings.Fields(truth)
	for _, p := range alignWords(rt, tt) {
		r, t := p[0], p[1]
		switch {
		case r >= 0 && mixed(rt[r]):
			s.crossScript++
		case r >= 0 && t >= 0 && wordScript(rt[r]) != neutral && wordScript(tt[t]) != neutral && wordScript(rt[r]) != wordScript(tt[t]):
			s.crossScript++
		default:
			continue
		}
		tw := ""
		if t >= 0 {
			tw = tt[t]
		}
		s.diffs = append(s.diffs, fmt.Sprintf("cross-script: read %q for %q", rt[r], tw))
	}
	if s.charErrors > 0 {
		rl, tl := strings.Split(read, "\n"), strings.Split(truth, "\n")
		for i := 0; i < max(len(rl), len(tl)); i++ {
			var a, b string
			if i < len(rl) {
				a = rl[i]
			}
			if i < len(tl) {
				b = tl[i]
			}
			if a != b {
				s.diffs = append(s.diffs, fmt.Sprintf("read  %q\n      want  %q", a, b))
			}
		}
	}
	return s
}

// alignWords aligns two word sequences (fewest edits, equal words free)
// and answers the pairs of indexes, -1 for a word with no partner.
func alignWords(a, b []string) [][2]int {
	n, m := len(a), len(b)
	d := make([][]int, n+1)
	for i := range d {
		d[i] = make([]int, m+1)
		d[i][0] = i
	}
	for j := 0; j <= m; j++ {
		d[0][j] = j
	}
	same := func(x, y string) bool { return foldWord(x) == foldWord(y) }
	for i := 1; i <= n; i++ {
		for j := 1; j <= m; j++ {
			c := 1
			if same(a[i-1], b[j-1]) {
				c = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+c)
		}
	}
	var out [][2]int
	for i, j := n, m; i > 0 || j > 0; {
		switch {
		case i > 0 && j > 0 && d[i][j] == d[i-1][j-1]+map[bool]int{true: 0, false: 1}[same(a[i-1], b[j-1])]:
			out = append(out, [2]int{i - 1, j - 1})
			i, j = i-1, j-1
		case i > 0 && d[i][j] == d[i-1][j]+1:
			out = append(out, [2]int{i - 1, -1})
			i--
		default:
			out = append(out, [2]int{-1, j - 1})
			j--
		}
	}
	return out
}

// foldWord is a word with look-alikes of the two scripts made one, for
// aligning a word read in the wrong script with the one it stands for.
func foldWord(w string) string {
	return strings.Map(func(r rune) rune {
		r = unicode.ToLower(r)
		if scriptOf(r) == cyrillic {
			if l, ok := lookAlike[r]; ok {
				return unicode.ToLower(l)
			}
		}
		return r
	}, w)
}

// readCorpusFrame reads one corpus frame with r, which forgets what earlier
// frames taught it first: each frame's figures are its own.
func readCorpusFrame(t testing.TB, r *Reader, c corpusFrame) Page {
	t.Helper()
	r.forget()
	p, err := r.Read(context.Background(), loadPNG(t, c.frame))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// corpusFloors are the accuracy each corpus frame must keep: character
// accuracy and word recall over its monospace and its proportional
// regions.
var corpusFloors = map[string]struct{ mono, prop, monoWords, propWords float64 }{
	"tiny-shell":    {mono: 1, monoWords: 1},
	"debian-login":  {mono: 1, monoWords: 1},
	"debian-shell":  {mono: 0.97, monoWords: 0.85}, // the kernel's font: 32 glyphs unlike the VGA font's, read by tesseract cold (capture_test.go says why)
	"tiny-bootlog":  {mono: 1, monoWords: 1},
	"tiny-dmesg":    {mono: 1, monoWords: 1},
	"tiny-dialog":   {mono: 1, monoWords: 1},
	"tinyx-scripts": {mono: 0.999, monoWords: 0.995},
	"tinyx-menu":    {mono: 0.999, monoWords: 0.99},
	"tinyx-xterms":  {mono: 0.999, monoWords: 0.995},
	"xfce-terminal": {mono: 0.999, monoWords: 0.995},
	"gtk-form":      {prop: 0.98, propWords: 0.98},
}

// TestCorpus reads every corpus frame and holds it to its floors; no word
// may come out in the other script's letters.
func TestCorpus(t *testing.T) {
	r := reader(t)
	for _, c := range loadCorpus(t) {
		t.Run(c.name, func(t *testing.T) {
			floor, ok := corpusFloors[c.name]
			if !ok {
				t.Fatalf("no floors for corpus frame %s: add them to corpusFloors", c.name)
			}
			p := readCorpusFrame(t, r, c)
			for _, k := range []struct {
				kind        string
				chars, word float64
			}{{"mono", floor.mono, floor.monoWords}, {"prop", floor.prop, floor.propWords}} {
				s := scoreRegions(p, c.regions, k.kind)
				if s.chars == 0 {
					continue
				}
				t.Logf("%s: characters %.4f (%d errors in %d), words %.4f (%d of %d), cross-script %d", k.kind, s.charAccuracy(), s.charErrors, s.chars, s.wordRecall(), s.wordsFound, s.words, s.crossScript)
				if s.charAccuracy() < k.chars || s.wordRecall() < k.word || s.crossScript > 0 {
					t.Errorf("%s: characters %.4f (floor %.4f), words %.4f (floor %.4f), cross-script %d (must be 0):\n  %s",
						k.kind, s.charAccuracy(), k.chars, s.wordRecall(), k.word, s.crossScript, strings.Join(s.diffs, "\n  "))
				}
			}
		})
	}
}

// Selections across the corpus, among the text put there: highlighted
// rows and a focused button are marked; title bars (twm's, a menu's), a
// line on a screen-wide colour (the dialog's back title) and text beside
// nothing are not.
func TestSelectionsAcrossTheCorpus(t *testing.T) {
	want := map[string][]string{
		"tinyx-scripts": {"Selected row in reverse video", "Выбранная строка меню"},
		"tiny-dialog":   {"<", "Ok", ">"},
	}
	// twm's menu highlights its entry in black on a black desktop: the
	// entry's band runs into the desktop, and the white entry below it
	// looks like reverse video; only its titles are held here.
	unsure := map[string][]string{"tinyx-menu": {"xterm", "restart"}}
	r := reader(t)
	for _, c := range loadCorpus(t) {
		p := readCorpusFrame(t, r, c)
		var got []string
		for _, l := range p.Lines {
			inside := slices.ContainsFunc(c.regions, func(r region) bool { return l.Centre().In(r.box) })
			if l.Selected && inside && !slices.Contains(unsure[c.name], l.Text) {
				got = append(got, l.Text)
			}
		}
		slices.Sort(got)
		w := slices.Clone(want[c.name])
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s: selected %q, want %q", c.name, got, w)
		}
	}
}
