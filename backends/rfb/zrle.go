package rfb

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ZRLE (rfbproto "ZRLE encoding"): each rect is a U32 length and that many
// bytes of ONE zlib stream that lasts the whole connection; inflated, it is
// 64x64 tiles, each a subencoding byte and its data. With our pixel format a
// CPIXEL is 3 bytes: B, G, R.

// maxZRLELeftover bounds the compressed bytes a rect may leave unread (a
// well-formed rect leaves only its sync-flush marker, about 5 bytes).
const maxZRLELeftover = 64 << 10

var errZRLEShort = errors.New("ZRLE data ended before its tiles did")

// zrleSource feeds inflate with a rect's compressed bytes straight off the
// connection, plus what earlier rects left unread. It is an io.ByteReader, so
// inflate reads no further than it needs.
type zrleSource struct {
	r         *bufio.Reader
	pending   []byte
	remaining int // compressed bytes of the current rect still on the wire
}

func (s *zrleSource) ReadByte() (byte, error) {
	if len(s.pending) > 0 {
		b := s.pending[0]
		s.pending = s.pending[1:]
		return b, nil
	}
	if s.remaining == 0 {
		return 0, errZRLEShort
	}
	b, err := s.r.ReadByte()
	if err != nil {
		return 0, err
	}
	s.remaining--
	return b, nil
}

func (s *zrleSource) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(s.pending) > 0 {
		n := copy(p, s.pending)
		s.pending = s.pending[n:]
		return n, nil
	}
	if s.remaining == 0 {
		return 0, errZRLEShort
	}
	n, err := s.r.Read(p[:min(len(p), s.remaining)])
	s.remaining -= n
	return n, err
}

// finishRect moves the compressed bytes inflate did not need into pending,
// so the wire is at the next message and the stream stays whole.
func (s *zrleSource) finishRect() error {
	if s.remaining == 0 {
		return nil
	}
	if len(s.pending)+s.remaining > maxZRLELeftover {
		return fmt.Errorf("a ZRLE rect left %d compressed bytes unused", s.remaining)
	}
	buf := make([]byte, len(s.pending)+s.remaining)
	n := copy(buf, s.pending)
	if _, err := io.ReadFull(s.r, buf[n:]); err != nil {
		return err
	}
	s.pending, s.remaining = buf, 0
	return nil
}

// zrleStream is the connection's inflater; it starts with the first rect
// because zlib reads its header on creation.
type zrleStream struct {
	src  zrleSource
	zr   io.ReadCloser
	out  *bufio.Reader // inflated bytes; never holds more than the flushed rect
	tile [64 * 64 * 3]byte
	pal  [128 * 3]byte
}

func (d *decoder) readZRLE(x, y, w, h int) error {
	var lb [4]byte
	if _, err := io.ReadFull(d.r, lb[:]); err != nil {
		return err
	}
	z := &d.zrle
	z.src.remaining = int(binary.BigEndian.Uint32(lb[:]))
	if z.zr == nil {
		zr, err := zlib.NewReader(&z.src)
		if err != nil {
			return fmt.Errorf("ZRLE stream: %w", err)
		}
		z.zr = zr
		z.out = bufio.NewReaderSize(zr, 16<<10)
	}
	for ty := y; ty < y+h; ty += 64 {
		th := min(64, y+h-ty)
		for tx := x; tx < x+w; tx += 64 {
			tw := min(64, x+w-tx)
			if err := d.readTile(tx, ty, tw, th); err != nil {
				return fmt.Errorf("ZRLE tile at (%d,%d): %w", tx, ty, err)
			}
		}
	}
	return z.src.finishRect()
}

// readTile decodes one tile into the framebuffer.
func (d *decoder) readTile(tx, ty, tw, th int) error {
	z := &d.zrle
	in := z.out
	sub, err := in.ReadByte()
	if err != nil {
		return err
	}
	n := tw * th
	switch {
	case sub == 0: // raw CPIXELs
		buf := z.tile[:3*n]
		if _, err := io.ReadFull(in, buf); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			d.setPixel(tx+i%tw, ty+i/tw, buf[3*i:])
		}
	case sub == 1: // solid
		c := z.tile[:3]
		if _, err := io.ReadFull(in, c); err != nil {
			return err
		}
		for j := 0; j < th; j++ {
			for i := 0; i < tw; i++ {
				d.setPixel(tx+i, ty+j, c)
			}
		}
	case sub <= 16: // packed palette
		size := int(sub)
		pal := z.pal[:3*size]
		if _, err := io.ReadFull(in, pal); err != nil {
			return err
		}
		bitsPer := 4
		switch {
		case size == 2:
			bitsPer = 1
		case size <= 4:
			bitsPer = 2
		}
		rowBytes := (tw*bitsPer + 7) / 8
		packed := z.tile[:rowBytes*th]
		if _, err := io.ReadFull(in, packed); err != nil {
			return err
		}
		mask := byte(1<<bitsPer - 1)
		for j := 0; j < th; j++ {
			row := packed[j*rowBytes:]
			for i := 0; i < tw; i++ {
				bit := i * bitsPer
				idx := int(row[bit/8]>>(8-bitsPer-bit%8)) & int(mask)
				if idx >= size {
					return fmt.Errorf("palette index %d of a %d-colour palette", idx, size)
				}
				d.setPixel(tx+i, ty+j, pal[3*idx:])
			}
		}
	case sub == 128: // plain RLE
		c := z.tile[:3]
		for p := 0; p < n; {
			if _, err := io.ReadFull(in, c); err != nil {
				return err
			}
			run, err := readRunLength(in, n-p)
			if err != nil {
				return err
			}
			for end := p + run; p < end; p++ {
				d.setPixel(tx+p%tw, ty+p/tw, c)
			}
		}
	case sub >= 130: // palette RLE
		size := int(sub) - 128
		pal := z.pal[:3*size]
		if _, err := io.ReadFull(in, pal); err != nil {
			return err
		}
		for p := 0; p < n; {
			b, err := in.ReadByte()
			if err != nil {
				return err
			}
			idx, run := int(b&0x7f), 1
			if b&0x80 != 0 {
				if run, err = readRunLength(in, n-p); err != nil {
					return err
				}
			}
			if idx >= size {
				return fmt.Errorf("palette index %d of a %d-colour palette", idx, size)
			}
			for end := p + run; p < end; p++ {
				d.setPixel(tx+p%tw, ty+p/tw, pal[3*idx:])
			}
		}
	default:
		return fmt.Errorf("unknown ZRLE subencoding %d", sub)
	}
	return nil
}

// readRunLength reads a run: bytes of 255 then one below 255, plus one. A run
// longer than what is left of the tile is an error, not a loop.
func readRunLength(in *bufio.Reader, left int) (int, error) {
	run := 1
	for {
		b, err := in.ReadByte()
		if err != nil {
			return 0, err
		}
		run += int(b)
		if run > left {
			return 0, fmt.Errorf("a run of %d pixels overflows the tile (%d left)", run, left)
		}
		if b != 255 {
			return run, nil
		}
	}
}

// setPixel stores a CPIXEL (B, G, R) as RGBA.
func (d *decoder) setPixel(x, y int, c []byte) {
	o := 4 * (y*d.width + x)
	d.pix[o+0] = c[2]
	d.pix[o+1] = c[1]
	d.pix[o+2] = c[0]
	d.pix[o+3] = 0xff
}
