package hostapi

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"image"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/image/draw"

	"github.com/poligon/poligon/backends"
)

// Frame is one console screenshot at full size.
type Frame struct {
	Image *image.RGBA
	At    time.Time     // when it was taken
	Took  time.Duration // the wait for it
	// Lag, when set, says why this is the console's last frame and not
	// one asked for: it may be older than the call.
	Lag string
	// Block is the compression block of a lossy frame (a PiKVM's JPEG:
	// its MCU); zero for a lossless one.
	Block image.Point
	// Encoded is the console's own encoding of exactly these pixels (a
	// PiKVM's JPEG) and EncodedType its MIME type; empty when it has none.
	Encoded     []byte
	EncodedType string
}

// Timing says what the frame waited for, for an answer's timing: line.
func (f Frame) Timing() string {
	if f.Lag != "" {
		return "last frame the console sent (" + f.Lag + ")"
	}
	return fmt.Sprintf("fresh frame in %.2f s", f.Took.Seconds())
}

// Size answers "WxH".
func (f Frame) Size() string {
	b := f.Image.Bounds()
	return fmt.Sprintf("%dx%d", b.Dx(), b.Dy())
}

// Digest is an xxHash64 of the pixels: equal frames, equal digests. A
// fast hash (not a cryptographic one): it names a frame, it guards nothing.
func (f Frame) Digest() string { return Digest(f.Image) }

// Digest names pixels: the frame: of the answers, and of the trace's steps.
func Digest(img *image.RGBA) string { return strconv.FormatUint(xxhash.Sum64(img.Pix), 16) }

// PNG encodes the frame, scaled by scale when 0 < scale < 1. A frame
// encoded lately (the same pixels, size and scale) answers the same bytes
// again (shared: callers do not change them): an agent looking at a
// screen that holds still pays once.
func (f Frame) PNG(scale float64) ([]byte, image.Rectangle, error) {
	b := f.Image.Bounds()
	shown := b
	if scale > 0 && scale < 1 {
		shown = image.Rect(0, 0, max(1, int(float64(b.Dx())*scale+0.5)), max(1, int(float64(b.Dy())*scale+0.5)))
	} else {
		scale = 1
	}
	key := pngKey{xxhash.Sum64(f.Image.Pix), b, scale}
	if data := pngs.get(key); data != nil {
		return data, shown, nil
	}
	img := f.Image
	if scale < 1 {
		img = image.NewRGBA(shown)
		draw.ApproxBiLinear.Scale(img, shown, f.Image, b, draw.Src, nil)
	}
	data, err := encodePNG(img)
	if err != nil {
		return nil, image.Rectangle{}, err
	}
	pngs.put(key, data)
	return data, shown, nil
}

// Encode answers the image an answer shows and its MIME type: the
// console's own encoding when the frame is shown whole and has one (a
// PiKVM's JPEG, passed on as it came: no second encoding), else PNG,
// scaled by scale when 0 < scale < 1.
func (f Frame) Encode(scale float64) ([]byte, string, image.Rectangle, error) {
	if len(f.Encoded) > 0 && (scale <= 0 || scale >= 1) {
		return f.Encoded, f.EncodedType, f.Image.Bounds(), nil
	}
	data, shown, err := f.PNG(scale)
	return data, "image/png", shown, err
}

// pngs are the last few encodings, by frame.
var pngs pngCache

type pngKey struct {
	digest uint64
	rect   image.Rectangle
	scale  float64
}

type pngCache struct {
	mu   sync.Mutex
	keys [4]pngKey
	data [4][]byte
	next int
}

func (c *pngCache) get(k pngKey) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, key := range c.keys {
		if key == k && c.data[i] != nil {
			return c.data[i]
		}
	}
	return nil
}

func (c *pngCache) put(k pngKey, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys[c.next], c.data[c.next] = k, data
	c.next = (c.next + 1) % len(c.keys)
}

// encodePNG writes img as an 8-bit RGB PNG (a screen has no alpha),
// several times faster than image/png: every row takes the Sub filter (on
// screens within a few per cent of the size image/png's per-row choice
// among five gets, at a fraction of its cost), and bands of rows deflate
// on separate cores into one zlib stream (each band but the last ends on a
// sync flush, so the next one starts byte-aligned; no match crosses them).
func encodePNG(img *image.RGBA) ([]byte, error) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	if w <= 0 || h <= 0 || w > 1<<20 || h > 1<<20 {
		return nil, fmt.Errorf("png: cannot encode a %dx%d image", w, h)
	}
	n := max(1, min(runtime.GOMAXPROCS(0), 4, h/64))
	per := (h + n - 1) / n
	bands := make([]pngBand, n)
	var wg sync.WaitGroup
	for i := range bands {
		y0, y1 := img.Rect.Min.Y+min(i*per, h), img.Rect.Min.Y+min((i+1)*per, h)
		wg.Go(func() { bands[i].deflate(img, y0, y1, i == n-1) })
	}
	wg.Wait()

	size, sum := 2+4, uint32(1)
	for _, b := range bands {
		size += b.buf.Len()
		sum = adler32Combine(sum, b.adler, b.n)
	}
	var out bytes.Buffer
	out.Grow(8 + 25 + 12 + size + 12)
	out.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits per sample, RGB
	pngChunk(&out, "IHDR", ihdr[:])
	parts := [][]byte{{0x78, 0x01}} // zlib: deflate, 32K window, fastest
	for i := range bands {
		parts = append(parts, bands[i].buf.Bytes())
	}
	parts = append(parts, binary.BigEndian.AppendUint32(nil, sum))
	pngChunk(&out, "IDAT", parts...)
	pngChunk(&out, "IEND")
	return out.Bytes(), nil
}

// pngBand is one band of rows, filtered and deflated.
type pngBand struct {
	buf   bytes.Buffer
	adler uint32 // of the filtered rows
	n     int    // their length
}

var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed)
	return w
}}

func (b *pngBand) deflate(img *image.RGBA, y0, y1 int, last bool) {
	fw := deflaters.Get().(*flate.Writer)
	defer deflaters.Put(fw)
	fw.Reset(&b.buf)
	sum := adler32.New()
	w := img.Rect.Dx()
	row := make([]byte, 1+3*w)
	row[0] = 1 // Sub: each byte less the same one of the pixel to its left
	for y := y0; y < y1; y++ {
		p := img.Pix[img.PixOffset(img.Rect.Min.X, y):][:4*w]
		var r0, g0, b0 byte
		for x, j := 0, 1; x < len(p); x, j = x+4, j+3 {
			r, g, bl := p[x], p[x+1], p[x+2]
			row[j], row[j+1], row[j+2] = r-r0, g-g0, bl-b0
			r0, g0, b0 = r, g, bl
		}
		fw.Write(row) // into a bytes.Buffer: no error
		sum.Write(row)
	}
	if last {
		fw.Close()
	} else {
		fw.Flush()
	}
	b.adler, b.n = sum.Sum32(), (y1-y0)*len(row)
}

// pngChunk writes one chunk: length, type, data, CRC of type and data.
func pngChunk(out *bytes.Buffer, typ string, parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out.Write(binary.BigEndian.AppendUint32(nil, uint32(n)))
	out.WriteString(typ)
	crc := crc32.ChecksumIEEE([]byte(typ))
	for _, p := range parts {
		out.Write(p)
		crc = crc32.Update(crc, crc32.IEEETable, p)
	}
	out.Write(binary.BigEndian.AppendUint32(nil, crc))
}

// adler32Combine is the Adler-32 of two byte runs from theirs and the
// second's length (zlib's adler32_combine).
func adler32Combine(a1, a2 uint32, len2 int) uint32 {
	const base = 65521
	rem := uint32(len2 % base)
	s1 := a1 & 0xffff
	s2 := rem * s1 % base
	s1 += a2&0xffff + base - 1
	s2 += a1>>16 + a2>>16 + base - rem
	if s1 >= base {
		s1 -= base
	}
	if s1 >= base {
		s1 -= base
	}
	if s2 >= 2*base {
		s2 -= 2 * base
	}
	if s2 >= base {
		s2 -= base
	}
	return s2<<16 | s1
}

// screen answers the VM's live console.
func (v *VM) screen(ctx context.Context) (backends.Screen, error) {
	c, err := backends.As[backends.Console](v.c.be, "console")
	if err != nil {
		return nil, err
	}
	s, err := c.Console(ctx, v.info.VMID)
	if errors.Is(err, backends.ErrNotRunning) {
		return nil, &Error{Message: fmt.Sprintf("vmid %d is not running: its console is dark", v.info.VMID), Hint: "start it with vm_start", Err: err}
	}
	if err != nil {
		return nil, wrap(err, "", "vmid %d console", v.info.VMID)
	}
	return s, nil
}

// Shot takes a screenshot no older than the call: a console whose live
// frame can lag (VNC: the server sends updates when it likes) is asked for
// the screen as it is. Should it not answer, the shot is its last frame
// and says so.
func (v *VM) Shot(ctx context.Context) (Frame, error) {
	s, err := v.screen(ctx)
	if err != nil {
		return Frame{}, err
	}
	return v.shot(ctx, s)
}

func (v *VM) shot(ctx context.Context, s backends.Screen) (Frame, error) {
	start := time.Now()
	fs, ok := s.(backends.FreshScreen)
	if !ok {
		return v.frame(ctx, s, start)
	}
	img, _, err := fs.FreshFrame(ctx)
	if err != nil && ctx.Err() == nil {
		f, ferr := v.frame(ctx, s, start)
		f.Lag = err.Error()
		return f, ferr
	}
	if err != nil {
		return Frame{}, wrap(err, "", "vmid %d screenshot", v.info.VMID)
	}
	f := Frame{Image: img, At: time.Now(), Took: time.Since(start), Block: blockOf(s)}
	v.c.env.last.set(v.vmKey(), f)
	return f, nil
}

// frame is the console's current frame as it has it (for a VNC console,
// the last update its server sent), noted as the VM's last frame.
func (v *VM) frame(ctx context.Context, s backends.Screen, start time.Time) (Frame, error) {
	f, err := v.current(ctx, s, start)
	if err == nil {
		v.c.env.last.set(v.vmKey(), f)
	}
	return f, err
}

// current is the console's current frame, noted nowhere.
func (v *VM) current(ctx context.Context, s backends.Screen, start time.Time) (Frame, error) {
	var (
		img  *image.RGBA
		data []byte
		mime string
		err  error
	)
	if es, ok := s.(backends.EncodedScreen); ok {
		img, data, mime, _, err = es.EncodedFrame(ctx)
	} else {
		img, _, err = s.Frame(ctx)
	}
	if err != nil {
		return Frame{}, wrap(err, "", "vmid %d screenshot", v.info.VMID)
	}
	return Frame{Image: img, At: time.Now(), Took: time.Since(start), Block: blockOf(s), Encoded: data, EncodedType: mime}, nil
}

func blockOf(s backends.Screen) image.Point {
	if l, ok := s.(backends.LossyScreen); ok {
		return l.FrameBlock()
	}
	return image.Point{}
}

// peek is the current frame, without asking: what the waits sample.
func (v *VM) peek(ctx context.Context) (Frame, error) {
	s, err := v.screen(ctx)
	if err != nil {
		return Frame{}, err
	}
	return v.frame(ctx, s, time.Now())
}

// Settle is the outcome of a wait on the screen.
type Settle struct {
	OK      bool // the condition held before the timeout
	Elapsed time.Duration
	Frame   Frame // the last frame seen
}

// sampleEvery is how often the waits look at the live frame: cheap, since
// the frame is in memory.
const sampleEvery = 50 * time.Millisecond

// WaitStill waits until the screen has not changed for still (default
// 400 ms: the manual's "two frames 400 ms apart identical") or timeout ends.
func (v *VM) WaitStill(ctx context.Context, still, timeout time.Duration) (Settle, error) {
	if still <= 0 {
		still = 400 * time.Millisecond
	}
	return v.watch(ctx, timeout, func(f Frame, stable time.Duration, _ bool) bool { return stable >= still })
}

// WaitChange waits until the screen differs from how it is now.
func (v *VM) WaitChange(ctx context.Context, timeout time.Duration) (Settle, error) {
	return v.watch(ctx, timeout, func(f Frame, _ time.Duration, changed bool) bool { return changed })
}

// watch samples the screen until done answers true or timeout passes.
// done sees the frame, how long the screen has been stable, and whether it
// has changed since the watch began.
func (v *VM) watch(ctx context.Context, timeout time.Duration, done func(f Frame, stable time.Duration, changed bool) bool) (Settle, error) {
	timeout = v.c.clampWait(timeout)
	start := time.Now()
	first, err := v.Shot(ctx)
	if err != nil {
		return Settle{}, err
	}
	if timeout <= 0 { // no wait: one look, and nothing can be said of a change
		return Settle{Frame: first}, nil
	}
	prev, stableSince, changed := first, start, false
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	confirm := false // the next look asks the console, not the live frame
	for {
		look := v.peek
		if confirm {
			look = v.Shot
		}
		f, err := look(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return Settle{Elapsed: time.Since(start), Frame: prev}, nil
			}
			return Settle{}, err
		}
		if frameChange(prev, f) {
			stableSince = f.At
		}
		if !changed && frameChange(first, f) {
			changed = true
		}
		prev = f
		if done(f, f.At.Sub(stableSince), changed) {
			if confirm {
				return Settle{OK: true, Elapsed: time.Since(start), Frame: f}, nil
			}
			// The live frame can lag the screen: what it shows is confirmed
			// on a fresh one before the wait ends.
			confirm = true
			continue
		}
		confirm = false
		select {
		case <-ctx.Done():
			return Settle{Elapsed: time.Since(start), Frame: prev}, nil
		case <-time.After(sampleEvery):
		}
	}
}

// significantChange tells two frames apart, ignoring a blinking text
// cursor: a change inside one small box (at most one character cell,
// 9x16 pixels of VGA text) that is not new content.
func significantChange(a, b *image.RGBA) bool {
	if a.Bounds() != b.Bounds() {
		return true
	}
	box := image.Rectangle{}
	w := a.Bounds().Dx()
	for i := 0; i < len(a.Pix); i += 4 {
		if a.Pix[i] != b.Pix[i] || a.Pix[i+1] != b.Pix[i+1] || a.Pix[i+2] != b.Pix[i+2] {
			p := image.Pt((i/4)%w, (i/4)/w)
			box = box.Union(image.Rectangle{Min: p, Max: p.Add(image.Pt(1, 1))})
			if box.Dx() > cursorW || box.Dy() > cursorH {
				return true
			}
		}
	}
	return false
}

// The largest change that may be a blinking cursor.
const cursorW, cursorH = 9, 16

// frameChange tells two frames of one console apart, allowing for the
// compression of lossy ones.
func frameChange(a, b Frame) bool {
	if b.Block.X <= 0 || b.Block.Y <= 0 {
		return significantChange(a.Image, b.Image)
	}
	return lossyChange(a.Image, b.Image, b.Block)
}

// How far a pixel of a JPEG frame must move to count: by at most
// jpegNoise it is the encoder's rounding; by more than jpegContent it is
// content (a glyph, the cursor), while ringing and chroma bleed stay below.
const jpegNoise, jpegContent = 16, 48

// lossyChange is significantChange for JPEG frames. A blinking cursor
// re-encodes the compression blocks around it, so pixels there that did
// not move differ too: the change is a cursor's when its content pixels
// fit one character cell (a pixel of blur around it allowed) and every
// other pixel that moved beyond the noise lies in the blocks that cell
// touches. A typed character (its cell and the cursor's next) or a word
// elsewhere still counts, as does a faint change away from the cursor.
func lossyChange(a, b *image.RGBA, block image.Point) bool {
	if a.Bounds() != b.Bounds() {
		return true
	}
	if bytes.Equal(a.Pix, b.Pix) {
		return false
	}
	const cw, ch = cursorW + 2, cursorH + 2
	// The widest run of blocks a cell can touch.
	spanW, spanH := (cw+2*block.X-2)/block.X*block.X, (ch+2*block.Y-2)/block.Y*block.Y
	var content, moved image.Rectangle
	w := a.Bounds().Dx()
	for i := 0; i < len(a.Pix); i += 4 {
		d := max(absDiff(a.Pix[i], b.Pix[i]), absDiff(a.Pix[i+1], b.Pix[i+1]), absDiff(a.Pix[i+2], b.Pix[i+2]))
		if d <= jpegNoise {
			continue
		}
		p := image.Pt((i/4)%w, (i/4)/w)
		px := image.Rectangle{Min: p, Max: p.Add(image.Pt(1, 1))}
		if moved = moved.Union(px); moved.Dx() > spanW || moved.Dy() > spanH {
			return true
		}
		if d > jpegContent {
			if content = content.Union(px); content.Dx() > cw || content.Dy() > ch {
				return true
			}
		}
	}
	if moved.Empty() {
		return false
	}
	if content.Empty() {
		return true // no cursor to blame: a faint change is a change
	}
	blocks := image.Rect(
		content.Min.X/block.X*block.X, content.Min.Y/block.Y*block.Y,
		(content.Max.X+block.X-1)/block.X*block.X, (content.Max.Y+block.Y-1)/block.Y*block.Y)
	return !moved.In(blocks)
}

func absDiff(x, y uint8) uint8 {
	if x > y {
		return x - y
	}
	return y - x
}
