package ocr

import (
	"image"

	"github.com/poligon/poligon/backends/ocr/internal/glyphs"
)

// Preparing a piece of the screen for tesseract, which reads best black
// text on white, with letters 20-30 px tall and a white border: whatever
// the colours on screen (white on blue, reverse video, grey on black), the
// crop's background becomes white and what differs most from it black;
// then it is scaled up and framed.

// prepared is one crop ready for recognition, in gray pixels.
type prepared struct {
	pix  []byte
	w, h int
	// scale and the crop's origin map tesseract's boxes back to the frame:
	// frame = origin + (p - pad) / scale.
	scale  int
	origin image.Point
}

// Preparation constants.
const (
	pad      = 10 // white border around a crop, in scaled pixels
	targetPx = 14 // scale tiny text up to about this height (with textord_min_xheight lowered, 6x13 reads as well at 1x as at 2x, 20 % faster)
	maxScale = 3
)

// scaleFor picks the integer scale that brings text of height h near
// targetPx.
func scaleFor(h int) int {
	s := (targetPx + h/2) / max(1, h)
	return min(maxScale, max(1, s))
}

// ground answers the colour text box r (w x h frame) stands on: the most
// common colour of the box and a one-pixel ring around it. The ring
// matters for small boxes, where the ink of one letter can outnumber its
// background; inside a highlight bar the bar's colour still wins.
func ground(px []uint32, w, h int, r image.Rectangle) uint32 {
	return background(px, w, r.Inset(-1).Intersect(image.Rect(0, 0, w, h)))
}

// background answers the colour most of box r is made of. Boxes of text
// hold a few colours (ground, ink, anti-aliasing): counted in a small
// table first, in a histogram of every colour only when there are more.
func background(px []uint32, w int, r image.Rectangle) uint32 {
	const few = 16
	var colours [few]uint32
	var counts [few]int
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
	row:
		for _, p := range px[y*w+r.Min.X : y*w+r.Max.X] {
			b := p & 0xf0f0f0 // the colour's top 4 bits per channel
			for i := 0; i < n; i++ {
				if colours[i] == b {
					counts[i]++
					continue row
				}
			}
			if n == few {
				return backgroundOfMany(px, w, r)
			}
			colours[n], counts[n] = b, 1
			n++
		}
	}
	best := 0
	for i := 1; i < n; i++ {
		if counts[i] > counts[best] {
			best = i
		}
	}
	return firstOf(px, w, r, colours[best])
}

// firstOf answers the exact colour of the first pixel of r in bucket b.
func firstOf(px []uint32, w int, r image.Rectangle, b uint32) uint32 {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for _, p := range px[y*w+r.Min.X : y*w+r.Max.X] {
			if p&0xf0f0f0 == b {
				return p
			}
		}
	}
	return 0
}

// backgroundOfMany is background over a histogram of all 4096 buckets.
func backgroundOfMany(px []uint32, w int, r image.Rectangle) uint32 {
	var counts [4096]uint16 // colours by their top 4 bits per channel
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for _, p := range px[y*w+r.Min.X : y*w+r.Max.X] {
			counts[p>>12&0xf00|p>>8&0xf0|p>>4&0xf]++
			n++
			if n == 65535 {
				break
			}
		}
	}
	best := 0
	for c, k := range counts {
		if k > counts[best] {
			best = c
		}
	}
	return firstOf(px, w, r, uint32(best&0xf00)<<12|uint32(best&0xf0)<<8|uint32(best&0xf)<<4)
}

// distance is the largest per-channel difference of two colours.
func distance(a, b uint32) int { return glyphs.Distance(a, b) }

// prepare cuts box r out of the frame's colours px (w wide), makes it
// black on white, scales it by scale and frames it in white. Only the box
// is taken: it holds all of the text's ink, and what lies around it (the
// edge of a highlight bar, a border) would only distract the recogniser.
func prepare(px []uint32, w, h int, r image.Rectangle, scale int) prepared {
	bg := ground(px, w, h, r)
	cw, ch := r.Dx(), r.Dy()
	// Ink strength: distance from the background, stretched so that the
	// farthest colour in the box is black.
	far := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for _, p := range px[y*w+r.Min.X : y*w+r.Max.X] {
			far = max(far, distance(p, bg))
		}
	}
	far = max(far, 48) // a faint box stays faint: noise is not text
	gray := make([]byte, cw*ch)
	for y := 0; y < ch; y++ {
		row := px[(r.Min.Y+y)*w+r.Min.X : (r.Min.Y+y)*w+r.Max.X]
		for x, p := range row {
			gray[y*cw+x] = byte(255 - min(255, distance(p, bg)*255/far))
		}
	}
	out := prepared{scale: scale, origin: r.Min}
	out.w, out.h = cw*scale+2*pad, ch*scale+2*pad
	out.pix = make([]byte, out.w*out.h)
	for i := range out.pix {
		out.pix[i] = 255
	}
	upscale(gray, cw, ch, scale, out.pix[pad*out.w+pad:], out.w)
	return out
}

// upscale scales src (w x h) by an integer factor into dst (stride
// dstride) with bilinear interpolation: smooth enough for the recogniser,
// and a hundredth of the cost of a general resampler.
func upscale(src []byte, w, h, k int, dst []byte, dstride int) {
	if k == 1 {
		for y := 0; y < h; y++ {
			copy(dst[y*dstride:y*dstride+w], src[y*w:(y+1)*w])
		}
		return
	}
	at := func(x, y int) int {
		x = min(max(x, 0), w-1)
		y = min(max(y, 0), h-1)
		return int(src[y*w+x])
	}
	// Output pixel (X, Y) samples source ((X+0.5)/k - 0.5, ...), in
	// fixed point with 2k as the denominator.
	for Y := 0; Y < h*k; Y++ {
		sy := 2*Y + 1 - k // numerator of the source y, denominator 2k
		y0 := floorDiv(sy, 2*k)
		fy := sy - y0*2*k // 0..2k-1
		row := dst[Y*dstride : Y*dstride+w*k]
		for X := range row {
			sx := 2*X + 1 - k
			x0 := floorDiv(sx, 2*k)
			fx := sx - x0*2*k
			a, b := at(x0, y0), at(x0+1, y0)
			c, d := at(x0, y0+1), at(x0+1, y0+1)
			top := a*(2*k-fx) + b*fx
			bot := c*(2*k-fx) + d*fx
			row[X] = byte((top*(2*k-fy) + bot*fy + 2*k*k) / (4 * k * k))
		}
	}
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && (a < 0) != (b < 0) {
		q--
	}
	return q
}
