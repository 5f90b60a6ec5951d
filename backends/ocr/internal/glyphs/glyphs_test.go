package glyphs

import (
	"bytes"
	"image"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The checked-in seed is what go generate makes of the sheets: a sheet
// changed without regenerating (or the other way) fails here.
func TestSeedIsUpToDate(t *testing.T) {
	names, err := filepath.Glob("sheets/*.txt")
	if err != nil || len(names) == 0 {
		t.Fatal("no sheets")
	}
	sort.Strings(names)
	var all []Glyph
	for _, n := range names {
		gs, _, err := ReadSheet(strings.TrimSuffix(n, ".txt"))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, gs...)
	}
	merged, _ := Merge(all)
	if !bytes.Equal(Encode(merged), seedFile) {
		t.Error("seed.bin is not what the sheets make: run go generate ./backends/ocr/internal/glyphs")
	}
	seed, err := Seed()
	if err != nil || len(seed) != len(merged) {
		t.Fatalf("Seed: %d glyphs, %v; the sheets make %d", len(seed), err, len(merged))
	}
	for i := range seed {
		if seed[i].Key() != merged[i].Key() || seed[i].Chars != merged[i].Chars {
			t.Fatalf("glyph %d: decoded %q, made %q", i, seed[i].Chars, merged[i].Chars)
		}
	}
}

// A damaged seed file is an error, not a panic or a short atlas.
func TestDecodeRejectsDamage(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("glyphs2\n"), seedFile[:len(seedFile)/2], append(append([]byte{}, seedFile...), 0)} {
		if _, err := Decode(b); err == nil {
			t.Errorf("Decode of %d bytes: no error", len(b))
		}
	}
}

// A cell's key does not depend on its colours: the same glyph drawn white
// on blue and black on white has one key; another glyph another.
func TestKeysIgnoreColours(t *testing.T) {
	glyph := []string{
		"......",
		"..#...",
		".#.#..",
		"#...#.",
		"#####.",
		"#...#.",
		"#...#.",
		"......",
	}
	draw := func(rows []string, ink, bg uint32) []uint32 {
		px := make([]uint32, 6*len(rows))
		for y, r := range rows {
			for x, c := range r {
				px[y*6+x] = bg
				if c == '#' {
					px[y*6+x] = ink
				}
			}
		}
		return px
	}
	var c Cell
	rows := image.Rect(0, 0, 6, len(glyph))
	a, _, _ := c.Key(draw(glyph, 0xffffff, 0x3050c0), 6, 0x3050c0, 0, 6, rows, 7)
	b, _, _ := c.Key(draw(glyph, 0x000000, 0xffffff), 6, 0xffffff, 0, 6, rows, 7)
	other := append([]string(nil), glyph...)
	other[1] = ".##..."
	d, _, _ := c.Key(draw(other, 0x000000, 0xffffff), 6, 0xffffff, 0, 6, rows, 7)
	if a != b || a == d {
		t.Errorf("keys: white on blue %x, black on white %x, another glyph %x", a, b, d)
	}
	if _, _, blank := c.Key(draw([]string{"......", "......"}, 0, 0xffffff), 6, 0xffffff, 0, 6, image.Rect(0, 0, 6, 2), 2); !blank {
		t.Error("an empty cell is not blank")
	}
}
