package hostapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
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
func (f Frame) Digest() string {
	return strconv.FormatUint(xxhash.Sum64(f.Image.Pix), 16)
}

// PNG encodes the frame, scaled by scale when 0 < scale < 1.
func (f Frame) PNG(scale float64) ([]byte, image.Rectangle, error) {
	img := image.Image(f.Image)
	if scale > 0 && scale < 1 {
		b := f.Image.Bounds()
		w, h := max(1, int(float64(b.Dx())*scale+0.5)), max(1, int(float64(b.Dy())*scale+0.5))
		dst := image.NewRGBA(image.Rect(0, 0, w, h))
		draw.ApproxBiLinear.Scale(dst, dst.Bounds(), f.Image, b, draw.Src, nil)
		img = dst
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: pngBuffers}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, image.Rectangle{}, err
	}
	return buf.Bytes(), img.Bounds(), nil
}

// pngBuffers reuses the encoder's buffers between screenshots.
var pngBuffers = &pngPool{}

type pngPool struct{ p sync.Pool }

func (p *pngPool) Get() *png.EncoderBuffer {
	b, _ := p.p.Get().(*png.EncoderBuffer)
	return b
}

func (p *pngPool) Put(b *png.EncoderBuffer) { p.p.Put(b) }

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
	return Frame{Image: img, At: time.Now(), Took: time.Since(start)}, nil
}

// frame is the console's current frame as it has it (for a VNC console,
// the last update its server sent).
func (v *VM) frame(ctx context.Context, s backends.Screen, start time.Time) (Frame, error) {
	img, _, err := s.Frame(ctx)
	if err != nil {
		return Frame{}, wrap(err, "", "vmid %d screenshot", v.info.VMID)
	}
	return Frame{Image: img, At: time.Now(), Took: time.Since(start)}, nil
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
		if significantChange(prev.Image, f.Image) {
			stableSince = f.At
		}
		if !changed && significantChange(first.Image, f.Image) {
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
