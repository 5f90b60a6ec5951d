package backendtest

import (
	"context"
	"fmt"
	"image"
	"image/draw"
	"strconv"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Screen is a VM's console: its frame is an image the test sets, and every
// input call is recorded in the backend's call log ("Key 101 ret", "Click
// 101 10 20 left 1", ...), through the same gates, hooks and faults as the
// other calls.
type Screen struct {
	b    *Backend
	vmid int

	mu        sync.Mutex
	img       *image.RGBA
	changedAt time.Time
}

func newScreen(b *Backend, vmid int) *Screen {
	return &Screen{b: b, vmid: vmid, img: image.NewRGBA(image.Rect(0, 0, 720, 400)), changedAt: time.Now()}
}

// Console answers the running VM's screen (the same one on every call).
func (b *Backend) Console(ctx context.Context, vmid int) (backends.Screen, error) {
	if err := b.enter(ctx, "Console", vmid, nil); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, err := b.runningLocked(vmid)
	if err != nil {
		return nil, err
	}
	return v.screen, nil
}

// Screen answers a VM's screen for the test to set frames on, without
// recording a call; nil for an unknown vmid.
func (b *Backend) Screen(vmid int) *Screen {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.vms[vmid]; ok {
		return v.screen
	}
	return nil
}

// SetFrame shows img (copied) on the screen; the frame changes now.
func (s *Screen) SetFrame(img image.Image) {
	cp := image.NewRGBA(img.Bounds())
	draw.Draw(cp, cp.Rect, img, img.Bounds().Min, draw.Src)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.img, s.changedAt = cp, time.Now()
}

func (s *Screen) frame() (*image.RGBA, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := image.NewRGBA(s.img.Rect)
	copy(cp.Pix, s.img.Pix)
	return cp, s.changedAt
}

// input records an input call and checks the VM still runs.
func (s *Screen) input(ctx context.Context, method string, args ...string) error {
	if err := s.b.enter(ctx, method, s.vmid, nil, args...); err != nil {
		return err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	_, err := s.b.runningLocked(s.vmid)
	return err
}

// Frame answers a copy of the frame and when it last changed. It is not
// recorded: screen waits poll it.
func (s *Screen) Frame(ctx context.Context) (*image.RGBA, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	img, at := s.frame()
	return img, at, nil
}

// Key records "Key vmid combo".
func (s *Screen) Key(ctx context.Context, combo string) error {
	return s.input(ctx, "Key", combo)
}

// Type records "Type vmid text".
func (s *Screen) Type(ctx context.Context, text string) error {
	return s.input(ctx, "Type", text)
}

// Move records "Move vmid x y".
func (s *Screen) Move(ctx context.Context, x, y int) error {
	return s.input(ctx, "Move", strconv.Itoa(x), strconv.Itoa(y))
}

// Click records "Click vmid x y button count".
func (s *Screen) Click(ctx context.Context, x, y int, b backends.Button, count int) error {
	return s.input(ctx, "Click", strconv.Itoa(x), strconv.Itoa(y), buttonName(b), strconv.Itoa(count))
}

// Drag records "Drag vmid x1 y1 x2 y2".
func (s *Screen) Drag(ctx context.Context, x1, y1, x2, y2 int) error {
	return s.input(ctx, "Drag", strconv.Itoa(x1), strconv.Itoa(y1), strconv.Itoa(x2), strconv.Itoa(y2))
}

// Wheel records "Wheel vmid x y steps".
func (s *Screen) Wheel(ctx context.Context, x, y, steps int) error {
	return s.input(ctx, "Wheel", strconv.Itoa(x), strconv.Itoa(y), strconv.Itoa(steps))
}

func buttonName(b backends.Button) string {
	switch b {
	case backends.Left:
		return "left"
	case backends.Middle:
		return "middle"
	case backends.Right:
		return "right"
	}
	return fmt.Sprintf("button%d", int(b))
}
