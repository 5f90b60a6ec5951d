package rfb

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"image"
	"math/rand"
	"testing"
)

// The tile kinds the test encoder writes, one per ZRLE subencoding family.
const (
	tileRaw = iota
	tileSolid
	tilePal2  // packed palette, 1 bit per pixel
	tilePal3  // packed palette, 2 bits
	tilePal12 // packed palette, 4 bits
	tileRLE   // plain RLE
	tilePalRLE
	tileKinds
)

// tileKindsWritten counts the tiles the encoder wrote of each kind, so the
// test can tell every subencoding was exercised.
var tileKindsWritten [tileKinds]int

// zrleEncoder writes ZRLE rects the way a server does: one zlib stream for
// the connection, sync-flushed at the end of every rect.
type zrleEncoder struct {
	buf bytes.Buffer
	zw  *zlib.Writer
}

func newZRLEEncoder() *zrleEncoder {
	e := &zrleEncoder{}
	e.zw = zlib.NewWriter(&e.buf)
	return e
}

// rect answers a rect header and its compressed data for img's region r,
// with tile i written as kind kinds(i).
func (e *zrleEncoder) rect(img *image.RGBA, r image.Rectangle, kind func(i int) int) []byte {
	var raw bytes.Buffer
	i := 0
	for ty := r.Min.Y; ty < r.Max.Y; ty += 64 {
		for tx := r.Min.X; tx < r.Max.X; tx += 64 {
			t := image.Rect(tx, ty, min(tx+64, r.Max.X), min(ty+64, r.Max.Y))
			writeTile(&raw, img, t, kind(i))
			i++
		}
	}
	e.buf.Reset()
	e.zw.Write(raw.Bytes())
	e.zw.Flush()
	out := rectHeader(r, EncodingZRLE)
	out = binary.BigEndian.AppendUint32(out, uint32(e.buf.Len()))
	return append(out, e.buf.Bytes()...)
}

func rectHeader(r image.Rectangle, enc int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(r.Min.X))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Min.Y))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Dx()))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Dy()))
	return binary.BigEndian.AppendUint32(b, uint32(enc))
}

func cpixel(img *image.RGBA, x, y int) []byte {
	o := img.PixOffset(x, y)
	return []byte{img.Pix[o+2], img.Pix[o+1], img.Pix[o]} // B, G, R
}

func tilePixels(img *image.RGBA, t image.Rectangle) [][]byte {
	var px [][]byte
	for y := t.Min.Y; y < t.Max.Y; y++ {
		for x := t.Min.X; x < t.Max.X; x++ {
			px = append(px, cpixel(img, x, y))
		}
	}
	return px
}

func paletteOf(px [][]byte) ([][]byte, map[string]int) {
	var pal [][]byte
	idx := map[string]int{}
	for _, p := range px {
		if _, ok := idx[string(p)]; !ok {
			idx[string(p)] = len(pal)
			pal = append(pal, p)
		}
	}
	return pal, idx
}

func writeRun(w *bytes.Buffer, n int) {
	n--
	for ; n >= 255; n -= 255 {
		w.WriteByte(255)
	}
	w.WriteByte(byte(n))
}

func writeTile(w *bytes.Buffer, img *image.RGBA, t image.Rectangle, kind int) {
	px := tilePixels(img, t)
	pal, idx := paletteOf(px)
	// Fit the kind to the pixels, as a server would.
	packed := kind == tilePal2 || kind == tilePal3 || kind == tilePal12
	switch {
	case len(pal) == 1 && kind != tileRaw && kind != tileRLE:
		kind = tileSolid
	case kind == tileSolid && len(pal) > 1, packed && len(pal) > 16:
		kind = tileRaw
	case kind == tilePalRLE && len(pal) > 127:
		kind = tileRLE
	}
	tileKindsWritten[kind]++
	switch kind {
	case tileSolid:
		w.WriteByte(1)
		w.Write(px[0])
	case tilePal2, tilePal3, tilePal12:
		w.WriteByte(byte(len(pal)))
		for _, p := range pal {
			w.Write(p)
		}
		bitsPer := map[bool]int{true: 1, false: 2}[len(pal) == 2]
		if len(pal) > 4 {
			bitsPer = 4
		}
		for y := 0; y < t.Dy(); y++ {
			var cur, nbits byte
			for x := 0; x < t.Dx(); x++ {
				cur = cur<<bitsPer | byte(idx[string(px[y*t.Dx()+x])])
				nbits += byte(bitsPer)
				if nbits == 8 {
					w.WriteByte(cur)
					cur, nbits = 0, 0
				}
			}
			if nbits > 0 {
				w.WriteByte(cur << (8 - nbits))
			}
		}
	case tileRLE, tilePalRLE:
		if kind == tileRLE {
			w.WriteByte(128)
		} else {
			w.WriteByte(byte(128 + len(pal)))
			for _, p := range pal {
				w.Write(p)
			}
		}
		for i := 0; i < len(px); {
			j := i
			for j < len(px) && bytes.Equal(px[j], px[i]) {
				j++
			}
			if kind == tileRLE {
				w.Write(px[i])
				writeRun(w, j-i)
			} else if j-i == 1 {
				w.WriteByte(byte(idx[string(px[i])]))
			} else {
				w.WriteByte(byte(idx[string(px[i])]) | 0x80)
				writeRun(w, j-i)
			}
			i = j
		}
	default:
		w.WriteByte(0)
		for _, p := range px {
			w.Write(p)
		}
	}
}

// testImage paints each 64x64 tile so that the kind the encoder will use
// for it is valid: few colours for palettes, long runs for RLE.
func testImage(w, h int, seed int64) *image.RGBA {
	rnd := rand.New(rand.NewSource(seed))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	colours := func(n int) [][3]byte {
		c := make([][3]byte, n)
		for i := range c {
			c[i] = [3]byte{byte(rnd.Intn(256)), byte(rnd.Intn(256)), byte(rnd.Intn(256))}
		}
		return c
	}
	kindOf := func(i int) int { return i % tileKinds }
	i := 0
	for ty := 0; ty < h; ty += 64 {
		for tx := 0; tx < w; tx += 64 {
			kind := kindOf(i)
			i++
			var pal [][3]byte
			switch kind {
			case tileSolid:
				pal = colours(1)
			case tilePal2:
				pal = colours(2)
			case tilePal3:
				pal = colours(3)
			case tilePal12, tilePalRLE:
				pal = colours(12)
			case tileRLE:
				pal = colours(40)
			}
			run, c := 0, [3]byte{}
			for y := ty; y < min(ty+64, h); y++ {
				for x := tx; x < min(tx+64, w); x++ {
					switch {
					case pal == nil:
						c = [3]byte{byte(rnd.Intn(256)), byte(rnd.Intn(256)), byte(rnd.Intn(256))}
					case kind == tileRLE || kind == tilePalRLE:
						if run == 0 { // runs from 1 to 600 pixels, so some need 255-bytes
							c, run = pal[rnd.Intn(len(pal))], 1+rnd.Intn(600)*rnd.Intn(2)
						}
						run--
					default:
						c = pal[rnd.Intn(len(pal))]
					}
					o := img.PixOffset(x, y)
					img.Pix[o], img.Pix[o+1], img.Pix[o+2], img.Pix[o+3] = c[0], c[1], c[2], 0xff
				}
			}
		}
	}
	return img
}

// zrleMessages answers server messages carrying img as ZRLE: two rects in
// one update and a third in a second update, all one zlib stream.
func zrleMessages(img *image.RGBA) []byte {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	enc := newZRLEEncoder()
	kinds := func(i int) int { return i % tileKinds }
	top := image.Rect(0, 0, w, h/3)
	mid := image.Rect(0, h/3, w, 2*h/3)
	bottom := image.Rect(0, 2*h/3, w, h)
	msg := []byte{msgFramebufferUpdate, 0, 0, 2}
	msg = append(msg, enc.rect(img, top, kinds)...)
	msg = append(msg, enc.rect(img, mid, func(i int) int { return kinds(i + 3) })...)
	msg = append(msg, msgFramebufferUpdate, 0, 0, 1)
	return append(msg, enc.rect(img, bottom, func(i int) int { return kinds(i + 5) })...)
}

func decodeAll(t testing.TB, w, h int, data []byte) *decoder {
	t.Helper()
	d, err := newDecoder(bufio.NewReader(bytes.NewReader(data)), w, h)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, _, err := d.readMessage()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("decoding: %v", err)
			}
			return d
		}
	}
}

func TestZRLEDecodesEverySubencoding(t *testing.T) {
	tileKindsWritten = [tileKinds]int{}
	for _, size := range [][2]int{{150, 100}, {64, 64}, {1, 1}, {65, 129}, {300, 200}} {
		img := testImage(size[0], size[1], int64(size[0]))
		d := decodeAll(t, size[0], size[1], zrleMessages(img))
		if !bytes.Equal(d.pix, img.Pix) {
			t.Errorf("%dx%d: the decoded frame differs from the encoded one", size[0], size[1])
		}
		if !d.fullyCovered() {
			t.Errorf("%dx%d: the decoder does not know the frame is complete", size[0], size[1])
		}
	}
	for kind, n := range tileKindsWritten {
		if n == 0 {
			t.Errorf("no tile of kind %d was written", kind)
		}
	}
}

func TestRawDecode(t *testing.T) {
	img := testImage(70, 30, 7)
	msg := []byte{msgFramebufferUpdate, 0, 0, 1}
	msg = append(msg, rectHeader(img.Rect, EncodingRaw)...)
	for i := 0; i < len(img.Pix); i += 4 {
		msg = append(msg, img.Pix[i+2], img.Pix[i+1], img.Pix[i], 0) // B, G, R, pad
	}
	d := decodeAll(t, 70, 30, msg)
	if !bytes.Equal(d.pix, img.Pix) {
		t.Error("raw decode differs")
	}
}

func TestDecoderRejectsHostileSizes(t *testing.T) {
	cases := map[string][]byte{
		"rect outside the frame": append([]byte{0, 0, 0, 1}, rectHeader(image.Rect(0, 0, 65535, 65535), EncodingRaw)...),
		"huge desktop size":      append([]byte{0, 0, 0, 1}, rectHeader(image.Rect(0, 0, 65535, 65535), EncodingDesktopSize)...),
		"huge ZRLE length": append(append([]byte{0, 0, 0, 1}, rectHeader(image.Rect(0, 0, 8, 8), EncodingZRLE)...),
			0xff, 0xff, 0xff, 0xff),
		"unknown encoding": append([]byte{0, 0, 0, 1}, rectHeader(image.Rect(0, 0, 8, 8), 7)...),
		"unknown message":  {200},
	}
	for name, data := range cases {
		d, err := newDecoder(bufio.NewReader(bytes.NewReader(data)), 64, 48)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.readMessage(); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
