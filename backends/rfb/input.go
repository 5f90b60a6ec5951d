package rfb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/poligon/poligon/backends"
)

// inputEvent is one key or pointer event and the pause after it.
type inputEvent struct {
	pointer bool
	key     Key
	down    bool
	mask    uint8
	x, y    int
	pause   time.Duration
}

// exec sends events in order, one input call at a time. If the connection
// drops, it waits (within ctx) for the reconnect and resumes at the first
// event not yet written, so nothing is lost or repeated. QEMU lifts every
// held key when a VNC client goes away, so before a key press on a new
// connection the keys this call still holds are pressed again. If exec gives
// up, it releases what it holds on a best-effort basis.
func (c *Client) exec(ctx context.Context, events []inputEvent) (err error) {
	select {
	case c.inputSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("rfb: waiting for the previous input to finish: %w", ctx.Err())
	case <-c.ctx.Done():
		return c.closedErr()
	}
	defer func() { <-c.inputSem }()

	var held []Key // keys down, in press order
	var mask uint8 // buttons down
	var px, py int // where they are down
	var last *link
	defer func() {
		if err != nil && (len(held) > 0 || mask != 0) {
			c.releaseAll(held, mask, px, py)
		}
	}()
	for i := 0; i < len(events); {
		s, err := c.liveLink(ctx)
		if err != nil {
			return err
		}
		ev := events[i]
		if s != last && last != nil && !ev.pointer && ev.down {
			for _, k := range held {
				if err := c.sendKey(s, k, true); err != nil {
					continue // the new connection broke too: wait for the next one
				}
			}
		}
		last = s
		if ev.pointer {
			err = s.send(pointerEventMsg(ev.mask, ev.x, ev.y))
		} else {
			err = c.sendKey(s, ev.key, ev.down)
		}
		if err != nil {
			c.log.Warn("rfb: input interrupted; resuming after the reconnect", "event", i, "of", len(events), "err", err)
			continue
		}
		if ev.pointer {
			mask, px, py = ev.mask, ev.x, ev.y
		} else {
			held = trackHeld(held, ev.key, ev.down)
		}
		i++
		if ev.pause > 0 {
			if err := sleep(ctx, c.ctx, ev.pause); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Client) sendKey(s *link, k Key, down bool) error {
	if s.extKeys.Load() {
		return s.send(extKeyEventMsg(k, down))
	}
	return s.send(keyEventMsg(k, down))
}

func trackHeld(held []Key, k Key, down bool) []Key {
	for i, h := range held {
		if h.Scancode == k.Scancode {
			if down {
				return held
			}
			return append(held[:i:i], held[i+1:]...)
		}
	}
	if down {
		return append(held, k)
	}
	return held
}

// releaseAll lifts held keys and buttons on the live link, if there is
// one; it does not wait for a reconnect (QEMU lifts them on disconnect).
func (c *Client) releaseAll(held []Key, mask uint8, x, y int) {
	c.mu.Lock()
	s := c.live
	c.mu.Unlock()
	if s == nil {
		return
	}
	for i := len(held) - 1; i >= 0; i-- {
		_ = c.sendKey(s, held[i], false)
	}
	if mask != 0 {
		_ = s.send(pointerEventMsg(0, x, y))
	}
}

func sleep(ctx, clientCtx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-clientCtx.Done():
		return ErrClosed
	}
}

// Key presses a combination of qemu sendkey names ("ctrl-alt-f2"): every key
// in order, then releases them in reverse. Nothing is sent if any name is
// unknown. QEMU quirk: ctrl-alt-1..9 switch QEMU's own consoles when its VNC
// display is not bound to one console, so the guest does not see them.
func (c *Client) Key(ctx context.Context, combo string) error {
	keys, err := ParseCombo(combo)
	if err != nil {
		return fmt.Errorf("rfb: %w", err)
	}
	return c.exec(ctx, comboEvents(keys, c.delay))
}

func comboEvents(keys []Key, delay time.Duration) []inputEvent {
	events := make([]inputEvent, 0, 2*len(keys))
	for _, k := range keys {
		events = append(events, inputEvent{key: k, down: true, pause: delay})
	}
	for i := len(keys) - 1; i >= 0; i-- {
		events = append(events, inputEvent{key: keys[i], down: false, pause: delay})
	}
	return events
}

// Type types text on the US layout, character by character (see
// TextStrokes). A character that no US key types fails the call before
// anything is sent.
func (c *Client) Type(ctx context.Context, text string) error {
	strokes, err := TextStrokes(text)
	if err != nil {
		return fmt.Errorf("rfb: %w; nothing was typed", err)
	}
	return c.exec(ctx, textEvents(strokes, c.delay))
}

// textEvents keeps Shift down across a run of shifted characters ("HELLO"),
// which halves the events such a run needs.
func textEvents(strokes []Stroke, delay time.Duration) []inputEvent {
	var events []inputEvent
	var holding []Key
	for _, s := range strokes {
		if !sameKeys(holding, s.Hold) {
			for i := len(holding) - 1; i >= 0; i-- {
				events = append(events, inputEvent{key: holding[i], down: false, pause: delay})
			}
			for _, k := range s.Hold {
				events = append(events, inputEvent{key: k, down: true, pause: delay})
			}
			holding = s.Hold
		}
		events = append(events,
			inputEvent{key: s.Key, down: true, pause: delay},
			inputEvent{key: s.Key, down: false, pause: delay})
	}
	for i := len(holding) - 1; i >= 0; i-- {
		events = append(events, inputEvent{key: holding[i], down: false, pause: delay})
	}
	return events
}

func sameKeys(a, b []Key) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Scancode != b[i].Scancode {
			return false
		}
	}
	return true
}

// checkPoint refuses coordinates outside the current frame.
func (c *Client) checkPoint(x, y int) error {
	w, h := c.Size()
	if x < 0 || y < 0 || x >= w || y >= h {
		return fmt.Errorf("rfb: point (%d,%d) is outside the %dx%d screen", x, y, w, h)
	}
	return nil
}

func pointer(mask uint8, x, y int, pause time.Duration) inputEvent {
	return inputEvent{pointer: true, mask: mask, x: x, y: y, pause: pause}
}

// moveTo puts the pointer at (x, y) on a w-wide, h-high screen, both axes
// set: the step (backends.StepFrom), then the point, each followed by
// pause. The pause after the step lets the guest read it: QEMU merges
// pointer reports not yet read.
func moveTo(x, y, w, h int, pause time.Duration) []inputEvent {
	sx, sy := backends.StepFrom(x, y, w, h)
	return []inputEvent{pointer(0, sx, sy, backends.PointerSettle), pointer(0, x, y, pause)}
}

// Move moves the pointer to (x, y) (absolute; the VM needs a tablet).
func (c *Client) Move(ctx context.Context, x, y int) error {
	if err := c.checkPoint(x, y); err != nil {
		return err
	}
	w, h := c.Size()
	return c.exec(ctx, moveTo(x, y, w, h, 0))
}

func buttonMask(b backends.Button) (uint8, error) {
	switch b {
	case backends.Left:
		return maskLeft, nil
	case backends.Middle:
		return maskMiddle, nil
	case backends.Right:
		return maskRight, nil
	}
	return 0, fmt.Errorf("rfb: unknown mouse button %d", b)
}

// Click moves to (x, y) and clicks count times: one click holds the button
// 300 ms; a double (or triple) click holds each press 50 ms, 50 ms apart, so
// the presses fall inside the desktop's double-click interval.
func (c *Client) Click(ctx context.Context, x, y int, b backends.Button, count int) error {
	mask, err := buttonMask(b)
	if err != nil {
		return err
	}
	if count < 1 || count > 10 {
		return fmt.Errorf("rfb: click count %d is out of range 1..10", count)
	}
	if err := c.checkPoint(x, y); err != nil {
		return err
	}
	w, h := c.Size()
	return c.exec(ctx, clickEvents(mask, x, y, w, h, count))
}

func clickEvents(mask uint8, x, y, w, h, count int) []inputEvent {
	hold, gap := backends.ClickHold, time.Duration(0)
	if count > 1 {
		hold, gap = backends.MultiClickHold, backends.MultiClickGap
	}
	events := moveTo(x, y, w, h, backends.PointerSettle)
	for i := 0; i < count; i++ {
		events = append(events, pointer(mask, x, y, hold), pointer(0, x, y, gap))
	}
	return events
}

// Drag presses the left button at (x1, y1), moves to (x2, y2) in steps and
// releases there.
func (c *Client) Drag(ctx context.Context, x1, y1, x2, y2 int) error {
	if err := c.checkPoint(x1, y1); err != nil {
		return err
	}
	if err := c.checkPoint(x2, y2); err != nil {
		return err
	}
	w, h := c.Size()
	return c.exec(ctx, dragEvents(x1, y1, x2, y2, w, h))
}

func dragEvents(x1, y1, x2, y2, w, h int) []inputEvent {
	dist := math.Hypot(float64(x2-x1), float64(y2-y1))
	steps := min(max(int(dist/20), 5), 30)
	events := append(moveTo(x1, y1, w, h, backends.PointerSettle), pointer(maskLeft, x1, y1, backends.DragHold))
	for i := 1; i <= steps; i++ {
		x := x1 + (x2-x1)*i/steps
		y := y1 + (y2-y1)*i/steps
		pause := backends.DragStepPause
		if i == steps {
			pause = backends.DragHold
		}
		events = append(events, pointer(maskLeft, x, y, pause))
	}
	return append(events, pointer(0, x2, y2, 0))
}

// Wheel scrolls at (x, y): negative steps scroll up, positive down; each
// step is a press and release of button 4 (up) or 5 (down).
func (c *Client) Wheel(ctx context.Context, x, y, steps int) error {
	if err := c.checkPoint(x, y); err != nil {
		return err
	}
	if steps < -100 || steps > 100 {
		return errors.New("rfb: wheel steps must be within -100..100")
	}
	w, h := c.Size()
	return c.exec(ctx, wheelEvents(x, y, w, h, steps))
}

func wheelEvents(x, y, w, h, steps int) []inputEvent {
	mask := uint8(maskWheelDown)
	if steps < 0 {
		mask, steps = maskWheelUp, -steps
	}
	events := moveTo(x, y, w, h, backends.PointerSettle)
	for i := 0; i < steps; i++ {
		events = append(events, pointer(mask, x, y, 0), pointer(0, x, y, backends.WheelPause))
	}
	return events
}
