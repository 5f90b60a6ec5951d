package ocr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/poligon/poligon/backends/ocr/internal/glyphs"
)

// The atlas answers character cells by their pixels (grid.go finds the
// cells): text on a character grid — the VGA console, a terminal — is read
// cell by cell, without tesseract, wherever every cell of a piece is one
// the atlas knows for certain.
//
// It knows two kinds of cells. The seed: the glyphs of the fonts the
// guests draw text in (internal/glyphs: the VGA BIOS font, misc-fixed,
// ...), made at build time from sheets the guests drew; they are certain.
// And cells it learned: where tesseract read a piece on a grid and its
// answer has as many characters as the piece has cells, each cell is an
// observation of what it reads as; a cell is answered once two reads
// agreed on it and three times as many reads as said otherwise. Learning
// is bounded (cells not yet answered make way for new ones) and, with a
// file, kept across restarts.

// cellChars is what a known cell reads as: one character, or look-alikes
// of two scripts that the word around it chooses between; a frame (box
// drawing, a block) is not text.
type cellChars struct {
	chars []rune
	frame bool
}

// learnt is what reads of one cell said: the character most said, how
// many reads said it, and how many said another (the other most said,
// which takes over when more reads say it).
type learnt struct {
	char      rune
	cw, left  uint8
	seen      uint8
	alt       rune
	altSeen   uint8 // reads that said another character than char
	altAgreed uint8 // of those, reads that said alt
}

// confirmations is how many reads must agree before a learned cell is
// answered; and three times as many as said otherwise.
const confirmations = 2

func (l *learnt) sure() bool { return l.seen >= confirmations && int(l.seen) >= 3*int(l.altSeen) }

type atlas struct {
	known map[uint64]cellChars // the seed: read-only

	mu      sync.Mutex
	faces_  []face // the cells to try, the seed's first
	learned map[uint64]*learnt
	limit   int
	file    string
	unsaved int // confirmations since the file was written
	loadErr error
}

// newAtlas makes an atlas of the seed and, when file names one that
// exists, what was learned before; limit bounds the cells learned.
func newAtlas(file string, limit int) *atlas {
	a := &atlas{known: map[uint64]cellChars{}, learned: map[uint64]*learnt{}, limit: limit, file: file}
	seed, err := glyphs.Seed()
	if err != nil {
		a.loadErr = err // a build with a damaged seed reads with tesseract alone
	}
	for _, g := range seed {
		a.known[g.Key()] = cellChars{chars: []rune(g.Chars), frame: g.Frame}
		a.addFace(g.CW, g.Asc, g.Desc, g.Left)
	}
	if file != "" {
		if err := a.load(); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.loadErr = err
		}
	}
	return a
}

// face is a cell size the atlas knows glyphs of: cw wide, asc rows above
// the baseline and desc from it down (both 0 for cells learned, whose
// face is not known: the rows are then the group's), and the columns its
// glyphs' ink starts at, as bits.
type face struct {
	cw, asc, desc int
	lefts         uint32
}

func (a *atlas) addFace(cw, asc, desc, left int) {
	for i, f := range a.faces_ {
		if f.cw == cw && f.asc == asc && f.desc == desc {
			a.faces_[i].lefts |= 1 << left
			return
		}
	}
	a.faces_ = append(a.faces_, face{cw: cw, asc: asc, desc: desc, lefts: 1 << left})
}

// faces answers the cells to try.
func (a *atlas) faces() []face {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.faces_)
}

// lookup answers what a cell reads as, if the atlas is sure.
func (a *atlas) lookup(k uint64) (cellChars, bool) {
	if c, ok := a.known[k]; ok {
		return c, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if l, ok := a.learned[k]; ok && l.sure() {
		return cellChars{chars: []rune{l.char}}, true
	}
	return cellChars{}, false
}

// observation is one cell of a read that tesseract answered on a grid.
type observation struct {
	key      uint64
	char     rune
	cw, left int
}

// learn records what one read said of its cells (each cell once a read).
func (a *atlas) learn(obs []observation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[uint64]bool{}
	for _, o := range obs {
		if _, ok := a.known[o.key]; ok || seen[o.key] {
			continue
		}
		seen[o.key] = true
		l, ok := a.learned[o.key]
		if !ok {
			if len(a.learned) >= a.limit && !a.evictLocked() {
				continue
			}
			a.learned[o.key] = &learnt{char: o.char, cw: uint8(o.cw), left: uint8(o.left), seen: 1}
			continue
		}
		was := l.sure()
		switch {
		case l.seen == 255 || l.altSeen == 255:
		case l.char == o.char:
			l.seen++
		default:
			l.altSeen++
			switch {
			case l.alt == o.char:
				l.altAgreed++
			case l.altAgreed <= 1:
				l.alt, l.altAgreed = o.char, 1
			}
			if l.altAgreed > l.seen { // the other answer is the common one
				l.char, l.alt = l.alt, l.char
				l.seen, l.altSeen, l.altAgreed = l.altAgreed, l.altSeen-l.altAgreed+l.seen, l.seen
			}
		}
		if l.sure() && !was {
			a.addFace(int(l.cw), 0, 0, int(l.left))
			a.unsaved++
		}
	}
}

// evictLocked makes room: it drops the cells not yet answered (a quarter
// of the limit at most). It answers false when every cell is answered:
// then nothing new is learned.
func (a *atlas) evictLocked() bool {
	n := 0
	for k, l := range a.learned {
		if !l.sure() {
			delete(a.learned, k)
			if n++; n >= a.limit/4 {
				break
			}
		}
	}
	return n > 0
}

// stats answers the seed's size and the cells learned, confirmed
// (answered) and disputed (reads disagreed: not answered).
func (a *atlas) stats() (seed, learned, confirmed, disputed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.learned {
		switch {
		case l.sure():
			confirmed++
		case l.altSeen > 0:
			disputed++
		}
	}
	return len(a.known), len(a.learned), confirmed, disputed
}

// The atlas file: "poligon-atlas2\n", then a 24-byte record a cell: key
// (8), character (4), the other character (4), cell width, first inked
// column, reads that said the character, reads that said another, reads
// that said the other, 3 bytes zero.
const (
	atlasMagic  = "poligon-atlas2\n"
	atlasRecord = 24
)

func (a *atlas) load() error {
	b, err := os.ReadFile(a.file)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(b, []byte(atlasMagic)) || (len(b)-len(atlasMagic))%atlasRecord != 0 {
		return fmt.Errorf("ocr: %s is not an atlas file (it is left alone and written anew)", a.file)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for r := b[len(atlasMagic):]; len(r) >= atlasRecord && len(a.learned) < a.limit; r = r[atlasRecord:] {
		l := &learnt{char: rune(binary.LittleEndian.Uint32(r[8:])), alt: rune(binary.LittleEndian.Uint32(r[12:])),
			cw: r[16], left: r[17], seen: r[18], altSeen: r[19], altAgreed: r[20]}
		if l.cw == 0 || l.cw > 32 || l.left >= l.cw {
			continue
		}
		a.learned[binary.LittleEndian.Uint64(r)] = l
		if l.sure() {
			a.addFace(int(l.cw), 0, 0, int(l.left))
		}
	}
	return nil
}

// save writes the learned cells to the file (a new file renamed over the
// old: a reader of it never sees half of one).
func (a *atlas) save() error {
	if a.file == "" {
		return nil
	}
	a.mu.Lock()
	out := make([]byte, 0, len(atlasMagic)+atlasRecord*len(a.learned))
	out = append(out, atlasMagic...)
	for k, l := range a.learned {
		var r [atlasRecord]byte
		binary.LittleEndian.PutUint64(r[:], k)
		binary.LittleEndian.PutUint32(r[8:], uint32(l.char))
		binary.LittleEndian.PutUint32(r[12:], uint32(l.alt))
		r[16], r[17], r[18], r[19], r[20] = l.cw, l.left, l.seen, l.altSeen, l.altAgreed
		out = append(out, r[:]...)
	}
	a.unsaved = 0
	a.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(a.file), 0o755); err != nil {
		return err
	}
	tmp := a.file + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, a.file)
}

// saveSoon writes the file when enough has been confirmed since the last
// write, so that a crash loses little.
func (a *atlas) saveSoon() error {
	a.mu.Lock()
	n := a.unsaved
	a.mu.Unlock()
	if n < 32 {
		return nil
	}
	return a.save()
}
