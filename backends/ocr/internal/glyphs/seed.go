package glyphs

import (
	_ "embed"
	"sync"
)

//go:generate go run ./gen

//go:embed seed.bin
var seedFile []byte

var (
	seedOnce   sync.Once
	seedGlyphs []Glyph
	seedErr    error
)

// Seed answers the seed atlas's glyphs (decoded once).
func Seed() ([]Glyph, error) {
	seedOnce.Do(func() { seedGlyphs, seedErr = Decode(seedFile) })
	return seedGlyphs, seedErr
}
