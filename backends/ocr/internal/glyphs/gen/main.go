// Command gen makes the seed atlas (seed.bin) from the glyph sheets: go
// generate in backends/ocr/internal/glyphs runs it. It prints what it left
// out and why (characters a font lacks, look-alikes), for the commit that
// changes a sheet to say.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/poligon/poligon/backends/ocr/internal/glyphs"
)

func main() {
	sheets := flag.String("sheets", "sheets", "the directory of the sheets (NAME.txt and NAME.png)")
	out := flag.String("out", "seed.bin", "the seed atlas to write")
	verbose := flag.Bool("v", false, "print every note, not only the counts")
	flag.Parse()
	names, err := filepath.Glob(filepath.Join(*sheets, "*.txt"))
	if err != nil || len(names) == 0 {
		fail(fmt.Errorf("no sheets in %s", *sheets))
	}
	sort.Strings(names)
	var all []glyphs.Glyph
	for _, n := range names {
		gs, notes, err := glyphs.ReadSheet(strings.TrimSuffix(n, ".txt"))
		if err != nil {
			fail(err)
		}
		report(filepath.Base(n), len(gs), notes, *verbose)
		all = append(all, gs...)
	}
	merged, notes := glyphs.Merge(all)
	report("merging", len(merged), notes, *verbose)
	twins := 0
	for _, g := range merged {
		if len([]rune(g.Chars)) > 1 {
			twins++
		}
	}
	b := glyphs.Encode(merged)
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fail(err)
	}
	fmt.Printf("%s: %d glyphs (%d read as either of two scripts' look-alikes), %d bytes\n", *out, len(merged), twins, len(b))
}

func report(what string, n int, notes []string, verbose bool) {
	fmt.Printf("%s: %d glyphs, %d notes\n", what, n, len(notes))
	if verbose {
		for _, s := range notes {
			fmt.Println("  " + s)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(1)
}
