package rfb

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"image"
	"io"
)

// Framebuffer size limits: a hostile or broken server must not make the
// client allocate gigabytes (a 65535x65535 RGBA frame would be 16 GiB).
const (
	defaultMaxSide   = 8192
	defaultMaxPixels = 8192 * 4608 // 151 MB of RGBA; 5K and 8K-wide screens fit
)

// decoder reads server messages off one connection and applies them to its
// working framebuffer. It is used by one goroutine only; the client copies
// finished updates out of it (see publish in client.go).
type decoder struct {
	r *bufio.Reader

	width, height int
	pix           []byte // RGBA, stride 4*width
	maxSide       int
	maxPixels     int

	zrle zrleStream

	// extKeyAck is set once the server acknowledged QEMU's ExtendedKeyEvent.
	extKeyAck bool

	// Coverage of the framebuffer since the last (re)size, in spans of 16
	// pixels per row, so "the first full frame" is known.
	covered   []bool
	uncovered int

	row []byte // scratch for one Raw row
}

// update is what one FramebufferUpdate message did.
type update struct {
	dirty      image.Rectangle // union of the pixel rects (not yet compared)
	pixelRects int
	resized    bool
	// echo: an ExtendedDesktopSize rect repeating the current size, which
	// is how QEMU answers a non-incremental request at once (fresh.go).
	echo bool
}

func newDecoder(r *bufio.Reader, width, height int) (*decoder, error) {
	d := &decoder{r: r, maxSide: defaultMaxSide, maxPixels: defaultMaxPixels}
	d.zrle.src.r = r
	if err := d.resize(width, height); err != nil {
		return nil, err
	}
	return d, nil
}

// resize replaces the framebuffer with a black one of the new size.
func (d *decoder) resize(w, h int) error {
	if w <= 0 || h <= 0 || w > d.maxSide || h > d.maxSide || w*h > d.maxPixels {
		return fmt.Errorf("the server announced a %dx%d framebuffer; the limit is %d pixels a side and %d pixels in all", w, h, d.maxSide, d.maxPixels)
	}
	d.width, d.height = w, h
	d.pix = make([]byte, 4*w*h)
	d.covered = make([]bool, h*spansPerRow(w))
	d.uncovered = len(d.covered)
	return nil
}

func spansPerRow(w int) int { return (w + 15) / 16 }

// fullyCovered reports whether every pixel arrived since the last resize.
func (d *decoder) fullyCovered() bool { return d.uncovered == 0 }

// markCovered records the 16-pixel spans a rect fills completely.
func (d *decoder) markCovered(x, y, w, h int) {
	spans := spansPerRow(d.width)
	first := (x + 15) / 16
	last := (x + w) / 16 // exclusive, unless the rect reaches the right edge
	if x+w == d.width {
		last = spans
	}
	for row := y; row < y+h; row++ {
		for s := first; s < last; s++ {
			if i := row*spans + s; !d.covered[i] {
				d.covered[i] = true
				d.uncovered--
			}
		}
	}
}

// readMessage reads one server message. For a FramebufferUpdate it applies
// the rects and describes them; other messages are read and dropped.
func (d *decoder) readMessage() (msgType byte, u update, err error) {
	msgType, err = d.r.ReadByte()
	if err != nil {
		return 0, u, err
	}
	switch msgType {
	case msgFramebufferUpdate:
		u, err = d.readUpdate()
		return msgType, u, err
	case msgSetColourMapEntries: // never used with a true-colour format
		var h [5]byte
		if _, err := io.ReadFull(d.r, h[:]); err != nil {
			return msgType, u, err
		}
		_, err = io.CopyN(io.Discard, d.r, 6*int64(binary.BigEndian.Uint16(h[3:])))
		return msgType, u, err
	case msgBell:
		return msgType, u, nil
	case msgServerCutText:
		var h [7]byte
		if _, err := io.ReadFull(d.r, h[:]); err != nil {
			return msgType, u, err
		}
		_, err = io.CopyN(io.Discard, d.r, int64(binary.BigEndian.Uint32(h[3:])))
		return msgType, u, err
	default:
		return msgType, u, fmt.Errorf("unknown server message type %d", msgType)
	}
}

func (d *decoder) readUpdate() (update, error) {
	var u update
	var h [3]byte
	if _, err := io.ReadFull(d.r, h[:]); err != nil {
		return u, err
	}
	n := int(binary.BigEndian.Uint16(h[1:]))
	for i := 0; i < n; i++ {
		var rh [12]byte
		if _, err := io.ReadFull(d.r, rh[:]); err != nil {
			return u, err
		}
		x := int(binary.BigEndian.Uint16(rh[0:]))
		y := int(binary.BigEndian.Uint16(rh[2:]))
		w := int(binary.BigEndian.Uint16(rh[4:]))
		hh := int(binary.BigEndian.Uint16(rh[6:]))
		enc := int32(binary.BigEndian.Uint32(rh[8:]))
		switch enc {
		case EncodingRaw, EncodingZRLE:
			if x+w > d.width || y+hh > d.height {
				return u, fmt.Errorf("rect %dx%d at (%d,%d) lies outside the %dx%d framebuffer", w, hh, x, y, d.width, d.height)
			}
			var err error
			if enc == EncodingRaw {
				err = d.readRaw(x, y, w, hh)
			} else {
				err = d.readZRLE(x, y, w, hh)
			}
			if err != nil {
				return u, err
			}
			if w > 0 && hh > 0 {
				u.dirty = u.dirty.Union(image.Rect(x, y, x+w, y+hh))
				u.pixelRects++
				d.markCovered(x, y, w, hh)
			}
		case EncodingDesktopSize:
			if err := d.sizeTo(w, hh, &u); err != nil {
				return u, err
			}
		case EncodingExtendedDesktopSize:
			// x is the reason, y the status; the size is current either way.
			var sh [4]byte
			if _, err := io.ReadFull(d.r, sh[:]); err != nil {
				return u, err
			}
			if _, err := io.CopyN(io.Discard, d.r, 16*int64(sh[0])); err != nil {
				return u, err
			}
			if w == d.width && hh == d.height {
				u.echo = true
			}
			if err := d.sizeTo(w, hh, &u); err != nil {
				return u, err
			}
		case EncodingQEMUExtendedKey:
			d.extKeyAck = true
		case EncodingLastRect:
			return u, nil
		default:
			return u, fmt.Errorf("the server sent a rect in encoding %d, which was not asked for", enc)
		}
	}
	return u, nil
}

// sizeTo applies a size the server announced; the same size is no change.
func (d *decoder) sizeTo(w, h int, u *update) error {
	if w == d.width && h == d.height {
		return nil
	}
	if err := d.resize(w, h); err != nil {
		return err
	}
	u.resized = true
	u.dirty = image.Rectangle{}
	return nil
}

// readRaw reads w*h pixels of B, G, R, pad.
func (d *decoder) readRaw(x, y, w, h int) error {
	if cap(d.row) < 4*w {
		d.row = make([]byte, 4*d.width)
	}
	row := d.row[:4*w]
	for j := 0; j < h; j++ {
		if _, err := io.ReadFull(d.r, row); err != nil {
			return err
		}
		dst := d.pix[4*((y+j)*d.width+x):]
		for i := 0; i < w; i++ {
			dst[4*i+0] = row[4*i+2]
			dst[4*i+1] = row[4*i+1]
			dst[4*i+2] = row[4*i+0]
			dst[4*i+3] = 0xff
		}
	}
	return nil
}
