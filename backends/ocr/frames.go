package ocr

import (
	"image"
	"slices"
	"sync"
)

// The reader remembers the last few frames it read (their pixels, ink
// and groups, and what each group read as), so that the next frame like
// one of them — the same screen with a line typed, a menu opened — is
// laid out again only in a band around the rows that differ: the groups
// there are found and read anew, the others keep what they read. A frame
// that differs in more than a third of its rows is laid out whole.

// keptFrames is how many frames are remembered: a few VMs' screens read in
// turn each find theirs (1280x800: 5 MB each).
const keptFrames = 4

// bandContext is how far above and below the rows that differ the band is
// laid out: runs of one colour down must be seen this far to be
// background (minRunDown), and a rule (a window's patterned border) must
// show as one, taller than text (maxTextHeight), on either side.
const bandContext = maxTextHeight + 4

type frames struct {
	mu   sync.Mutex
	memo []*frameMemo
}

// frameMemo is one frame read: its pixels (packed), its ink and what its
// groups read as.
type frameMemo struct {
	w, h    int
	px      []uint32
	ink     []bool
	results []groupResult
}

// take answers the remembered frame of img's size most like it (the
// fewest rows that differ, of every eighth), taken out of the memory for
// this read, or a new one (fresh).
func (f *frames) take(img *image.RGBA) (*frameMemo, bool) {
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	f.mu.Lock()
	defer f.mu.Unlock()
	best, bestDiff := -1, h
	for i, m := range f.memo {
		if m.w != w || m.h != h {
			continue
		}
		d := 0
		for y := 0; y < h; y += 8 {
			if !m.sameRow(img, y) {
				d++
			}
		}
		if d < bestDiff {
			best, bestDiff = i, d
		}
	}
	if best < 0 {
		return &frameMemo{w: w, h: h}, true
	}
	m := f.memo[best]
	f.memo = append(f.memo[:best], f.memo[best+1:]...)
	return m, false
}

// give puts m back, the most recent.
func (f *frames) give(m *frameMemo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.memo = append([]*frameMemo{m}, f.memo...)
	if len(f.memo) > keptFrames {
		f.memo = f.memo[:keptFrames]
	}
}

func (m *frameMemo) sameRow(img *image.RGBA, y int) bool {
	row := img.Pix[y*img.Stride : y*img.Stride+4*m.w]
	for x, p := range m.px[y*m.w : (y+1)*m.w] {
		if p != uint32(row[4*x])<<16|uint32(row[4*x+1])<<8|uint32(row[4*x+2]) {
			return false
		}
	}
	return true
}

// layout takes img whole: its pixels, ink and groups.
func (m *frameMemo) layout(img *image.RGBA) []image.Rectangle {
	m.px = rgb(img)
	m.ink = inkMask(m.px, m.w, m.h)
	m.results = nil
	return groups(m.px, m.w, m.h, blobs(m.ink, m.w, m.h))
}

// relayout takes img, a frame like m's, where it differs from it: it
// answers the groups read before that stand clear of the change, and the
// groups to read (those the layout of the band around the change finds
// there).
func (m *frameMemo) relayout(img *image.RGBA) (kept []groupResult, fresh []image.Rectangle) {
	var changed []int
	for y := 0; y < m.h; y++ {
		if !m.sameRow(img, y) {
			changed = append(changed, y)
		}
	}
	if len(changed) == 0 {
		return m.results, nil
	}
	if 3*len(changed) > m.h {
		return nil, m.layout(img)
	}
	// The new pixels, packed.
	sub := image.NewRGBA(image.Rect(0, 0, m.w, 1))
	for _, y := range changed {
		copy(sub.Pix, img.Pix[y*img.Stride:y*img.Stride+4*m.w])
		copy(m.px[y*m.w:(y+1)*m.w], rgb(sub))
	}
	// A change reaches the ink mask of rows within minRunDown of it (a run
	// of one colour down grows or shrinks): find the ink of those rows
	// anew, with the context a band needs, and see which rows' ink
	// changed.
	moved := map[int]bool{}
	for _, y := range changed {
		moved[y] = true
	}
	for _, cl := range clusters(changed, 2*(minRunDown+bandContext)) {
		z0, z1 := max(0, cl[0]-minRunDown), min(m.h, cl[1]+minRunDown)
		i0, i1 := max(0, z0-bandContext), min(m.h, z1+bandContext)
		ink := inkMask(m.px[i0*m.w:i1*m.w], m.w, i1-i0)
		for y := z0; y < z1; y++ {
			row := ink[(y-i0)*m.w : (y-i0+1)*m.w]
			if !slices.Equal(row, m.ink[y*m.w:(y+1)*m.w]) {
				copy(m.ink[y*m.w:(y+1)*m.w], row)
				moved[y] = true
			}
		}
	}
	// The spans of rows to lay out again: the rows whose pixels or ink
	// changed, and the groups read before that they touch, whole.
	var rows []int
	for y := range moved {
		rows = append(rows, y)
	}
	slices.Sort(rows)
	spans := clusters(rows, 2)
	for grew := true; grew; {
		grew = false
		for i := range spans {
			for _, g := range m.results {
				if g.box.Min.Y < spans[i][1]+1 && g.box.Max.Y > spans[i][0]-1 {
					sp := [2]int{max(0, min(spans[i][0], g.box.Min.Y-1)), min(m.h, max(spans[i][1], g.box.Max.Y+1))}
					grew = grew || sp != spans[i]
					spans[i] = sp
				}
			}
		}
		spans = mergeSpans(spans)
	}
	// Lay each span out in a band around it, on the ink as it is now; its
	// groups are the new ones. A group that reaches the band's edge may go
	// on beyond it (a picture's strokes): then the frame is laid out whole.
	for _, sp := range spans {
		b0, b1 := max(0, sp[0]-bandContext), min(m.h, sp[1]+bandContext)
		px, ink := m.px[b0*m.w:b1*m.w], m.ink[b0*m.w:b1*m.w]
		for _, g := range groups(px, m.w, b1-b0, blobs(ink, m.w, b1-b0)) {
			g = g.Add(image.Pt(0, b0))
			if g.Min.Y >= sp[1] || g.Max.Y <= sp[0] {
				continue
			}
			if g.Min.Y <= b0 && b0 > 0 || g.Max.Y >= b1 && b1 < m.h {
				return nil, m.layout(img)
			}
			fresh = append(fresh, g)
		}
	}
	for _, g := range m.results {
		clear := true
		for _, sp := range spans {
			clear = clear && (g.box.Max.Y <= sp[0] || g.box.Min.Y >= sp[1])
		}
		for _, n := range fresh {
			clear = clear && !n.Overlaps(g.box)
		}
		if clear {
			kept = append(kept, g)
		}
	}
	return kept, fresh
}

// mergeSpans joins overlapping spans of rows.
func mergeSpans(spans [][2]int) [][2]int {
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var out [][2]int
	for _, sp := range spans {
		if n := len(out); n > 0 && sp[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], sp[1])
			continue
		}
		out = append(out, sp)
	}
	return out
}

// clusters answers the spans [from, to) of sorted rows, rows closer than
// gap in one.
func clusters(rows []int, gap int) [][2]int {
	var out [][2]int
	for _, y := range rows {
		if n := len(out); n > 0 && y < out[n-1][1]+gap {
			out[n-1][1] = y + 1
		} else {
			out = append(out, [2]int{y, y + 1})
		}
	}
	return out
}
