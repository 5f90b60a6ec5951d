package dataset

import (
	"image"
	"math/bits"
)

// The perceptual "same screen" test the exporter keeps the benchmark out
// with: a 16x16 average hash within 8 bits AND a 64x40 grey thumbnail
// within 2 grey levels (mean absolute difference). Both are area averages
// over the whole frame, so an eval frame saved at scale 0.5 matches its
// full-size twin, while a screen that differs in a dialog or a list does
// not: the hash alone tolerates too much, the thumbnail alone would let
// a global brightness shift through.
const (
	hashSide      = 16
	thumbW        = 64
	thumbH        = 40
	maxHashBits   = 8
	maxThumbDelta = 2.0
)

// Fingerprint is a frame reduced for the same-screen test.
type Fingerprint struct {
	Hash  [hashSide * hashSide / 64]uint64
	Thumb [thumbW * thumbH]uint8
}

// FingerprintOf reduces an image: greys averaged over 16x16 and 64x40
// cells of the whole frame. Both grids are read off one 64x80 grid of
// sums (80 rows: 16 and 40 both divide it), and pixel x of a w-wide frame
// lies in its cell x*64/w, so a row is summed in 64 runs.
func FingerprintOf(img image.Image) *Fingerprint {
	const gw, gh = thumbW, 80
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	var fp Fingerprint
	if w == 0 || h == 0 {
		return &fp
	}
	var sum [gw * gh]uint64
	var n [gw * gh]uint64
	var colEnd [gw]int // the run of cell c ends before colEnd[c]
	for c := range gw {
		colEnd[c] = ((c+1)*w + gw - 1) / gw // the first x with x*gw/w >= c+1
	}
	row := make([]uint8, w)
	for y := range h {
		greyRow(img, b.Min.Y+y, row)
		g := y * gh / h * gw
		x := 0
		for c, end := range colEnd {
			var s uint64
			for _, v := range row[x:end] {
				s += uint64(v)
			}
			sum[g+c] += s
			n[g+c] += uint64(end - x)
			x = end
		}
	}
	// Cells stay empty when the frame is smaller than the grid.
	mean := func(sums, counts []uint64) float64 {
		var s, k uint64
		for i := range sums {
			s += sums[i]
			k += counts[i]
		}
		if k == 0 {
			return 0
		}
		return float64(s) / float64(k)
	}
	var cells [hashSide * hashSide]float64
	var avg float64
	for i := range cells {
		cx, cy := i%hashSide*(gw/hashSide), i/hashSide*(gh/hashSide)
		var sums, counts []uint64
		for r := cy; r < cy+gh/hashSide; r++ {
			sums = append(sums, sum[r*gw+cx:r*gw+cx+gw/hashSide]...)
			counts = append(counts, n[r*gw+cx:r*gw+cx+gw/hashSide]...)
		}
		cells[i] = mean(sums, counts)
		avg += cells[i]
	}
	avg /= float64(len(cells))
	for i, c := range cells {
		if c > avg {
			fp.Hash[i/64] |= 1 << (i % 64)
		}
	}
	for i := range fp.Thumb {
		r, c := i/thumbW*(gh/thumbH), i%thumbW
		v := mean([]uint64{sum[r*gw+c], sum[(r+1)*gw+c]}, []uint64{n[r*gw+c], n[(r+1)*gw+c]})
		fp.Thumb[i] = uint8(v + 0.5)
	}
	return &fp
}

// Matches says whether two fingerprints show the same screen.
func (a *Fingerprint) Matches(b *Fingerprint) bool {
	d := 0
	for i := range a.Hash {
		d += bits.OnesCount64(a.Hash[i] ^ b.Hash[i])
	}
	if d > maxHashBits {
		return false
	}
	var sum int
	for i := range a.Thumb {
		v := int(a.Thumb[i]) - int(b.Thumb[i])
		if v < 0 {
			v = -v
		}
		sum += v
	}
	return float64(sum)/float64(len(a.Thumb)) <= maxThumbDelta
}

// greyRow reads row y of img as 8-bit luma (BT.601 weights), fast for the
// image types the PNG and JPEG decoders answer.
func greyRow(img image.Image, y int, out []uint8) {
	b := img.Bounds()
	luma := func(r, g, bl uint32) uint8 { return uint8((19595*r + 38470*g + 7471*bl + 1<<15) >> 24) }
	switch m := img.(type) {
	case *image.RGBA:
		lumaRow(m.Pix[m.PixOffset(b.Min.X, y):][:4*len(out)], out)
	case *image.NRGBA: // opaque screenshots: the same bytes as RGBA
		lumaRow(m.Pix[m.PixOffset(b.Min.X, y):][:4*len(out)], out)
	case *image.Gray:
		copy(out, m.Pix[m.PixOffset(b.Min.X, y):])
	case *image.YCbCr: // a JPEG: Y is the luma already
		copy(out, m.Y[m.YOffset(b.Min.X, y):])
	case *image.Paletted:
		var pal [256]uint8
		for i, c := range m.Palette {
			r, g, bl, _ := c.RGBA()
			pal[i] = luma(r, g, bl)
		}
		p := m.Pix[m.PixOffset(b.Min.X, y):]
		for x := range out {
			out[x] = pal[p[x]]
		}
	default:
		for x := range out {
			r, g, bl, _ := img.At(b.Min.X+x, y).RGBA()
			out[x] = luma(r, g, bl)
		}
	}
}

// lumaRow converts 8-bit RGBA pixels to luma.
func lumaRow(p []uint8, out []uint8) {
	for x := range out {
		px := p[4*x : 4*x+3 : 4*x+3]
		out[x] = uint8((19595*uint32(px[0]) + 38470*uint32(px[1]) + 7471*uint32(px[2]) + 1<<15) >> 16)
	}
}
