package bmc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/jpeg" // Supermicro's capture, should it be served one day
	_ "image/png"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// screenBench is a bench whose BMC captures the screen.
type screenBench struct{ *Bench }

var _ backends.Console = (*screenBench)(nil)

// Console answers the BMC's screen capture; vmid is ignored (a bench is one
// machine). The Screen is view-only: Redfish carries no keyboard or mouse.
func (s *screenBench) Console(ctx context.Context, vmid int) (backends.Screen, error) {
	s.screenOnce.Do(func() { s.screen = &screen{b: s.Bench} })
	return s.screen, nil
}

// screen is the capture of one bench, shared by every caller.
type screen struct {
	b       *Bench
	mu      sync.Mutex
	sum     [32]byte
	changed time.Time
}

// Frame captures the screen now (one session and one capture; an iDRAC
// takes a few seconds) and answers when it last changed between captures.
func (s *screen) Frame(ctx context.Context) (*image.RGBA, time.Time, error) {
	var data []byte
	err := s.b.run(ctx, "screenshot", func(o *op) error {
		img, _, err := o.client.Screenshot(o.ctx)
		if err != nil {
			return err
		}
		// bmclib's Supermicro capture can answer no image and no error.
		if len(img) == 0 {
			return errors.New("the BMC answered an empty screen capture")
		}
		data = img
		return nil
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: screenshot: the capture is not an image: %w", s.b.Kind(), err)
	}
	rgba := image.NewRGBA(image.Rect(0, 0, img.Bounds().Dx(), img.Bounds().Dy()))
	draw.Draw(rgba, rgba.Bounds(), img, img.Bounds().Min, draw.Src)
	sum := sha256.Sum256(rgba.Pix)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sum != s.sum || s.changed.IsZero() {
		s.sum, s.changed = sum, time.Now()
	}
	return rgba, s.changed, nil
}

func (s *screen) noInput() error {
	return backends.WithHint(fmt.Errorf("%s: the %s is view-only: Redfish has no keyboard or mouse: %w",
		s.b.Kind(), s.b.d.screen, backends.ErrUnsupported),
		"type and click through a PiKVM on this machine, or in the BMC's own virtual console")
}

func (s *screen) Key(context.Context, string) error                           { return s.noInput() }
func (s *screen) Type(context.Context, string) error                          { return s.noInput() }
func (s *screen) Move(context.Context, int, int) error                        { return s.noInput() }
func (s *screen) Click(context.Context, int, int, backends.Button, int) error { return s.noInput() }
func (s *screen) Drag(context.Context, int, int, int, int) error              { return s.noInput() }
func (s *screen) Wheel(context.Context, int, int, int) error                  { return s.noInput() }
