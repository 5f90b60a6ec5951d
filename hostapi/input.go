package hostapi

import (
	"context"
	"image"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
)

// MaxTypeLen bounds one type call: longer text belongs in a file.
const MaxTypeLen = 4096

// inputBudget bounds one input call: a console that went away (the VM
// died) must not hold the VM's lock forever while it waits to reconnect.
func inputBudget(textLen int) time.Duration {
	return 30*time.Second + time.Duration(textLen)*50*time.Millisecond
}

// input runs fn on the VM's console under its lock, once the bench's gates
// allow its effect (what names it in a refusal).
func (v *VM) input(ctx context.Context, budget time.Duration, effect, what string, fn func(context.Context, backends.Screen) error) error {
	if m, ok := v.c.machine(); ok && effect == EffectPower && m.Approval != "" && m.Allow[EffectPower] {
		// Keys cannot carry a confirmation: the action goes where it can.
		return Failf("use bench_power, where a power action can be confirmed", "%s is a power action on bench %s, which asks for approval", what, m.Bench)
	}
	if err := v.gate(effect, what, Consent{}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	s, err := v.screen(ctx)
	if err != nil {
		return err
	}
	return fn(ctx, s)
}

// inputError keeps a console's own refusal (unknown key, bad point) as the
// message and adds the hint.
func inputError(err error, hint string) error {
	if err == nil {
		return nil
	}
	return wrap(err, hint, "")
}

// Type types text on the console keyboard.
func (v *VM) Type(ctx context.Context, text string) error {
	if len(text) > MaxTypeLen {
		return Failf("write long text into a file with vm_file_write instead", "text is %d bytes, at most %d", len(text), MaxTypeLen)
	}
	return v.input(ctx, inputBudget(len(text)), EffectHID, "typing", func(ctx context.Context, s backends.Screen) error {
		return inputError(s.Type(ctx, text), "only characters of the US keyboard layout can be typed; \\n is Enter, \\t is Tab")
	})
}

// Press presses a key or combination by qemu sendkey name.
func (v *VM) Press(ctx context.Context, key string) error {
	return v.input(ctx, inputBudget(0), keyEffect(key), "key "+key, func(ctx context.Context, s backends.Screen) error {
		return inputError(s.Key(ctx, key), "key names are qemu sendkey names joined by -: ret, tab, esc, spc, backspace, up, f2, ctrl-c, alt-f2, ctrl-alt-f2")
	})
}

// ParseButton maps a button name to a backends.Button.
func ParseButton(name string) (backends.Button, error) {
	switch strings.ToLower(name) {
	case "", "left":
		return backends.Left, nil
	case "middle":
		return backends.Middle, nil
	case "right":
		return backends.Right, nil
	}
	return 0, Failf("button is left, middle or right", "unknown button %q", name)
}

// checkPoint refuses coordinates outside the current frame, and, with a
// frame digest in since, points near which the screen has changed since
// that frame: compared with a frame asked for, since the console's last
// one may not show a change yet.
func (v *VM) checkPoint(ctx context.Context, s backends.Screen, since string, pts ...[2]int) error {
	look := v.shot
	if since == "" {
		look = func(ctx context.Context, s backends.Screen) (Frame, error) { return v.frame(ctx, s, time.Now()) }
	}
	f, err := look(ctx, s)
	if err != nil {
		return err
	}
	img := f.Image
	b := img.Bounds()
	for _, p := range pts {
		if p[0] < 0 || p[1] < 0 || p[0] >= b.Dx() || p[1] >= b.Dy() {
			return Failf("coordinates are full-size console pixels: take a ui_screenshot and read its size line",
				"point %d,%d is outside the %dx%d console", p[0], p[1], b.Dx(), b.Dy())
		}
	}
	if since == "" {
		return nil
	}
	var region image.Rectangle
	for _, p := range pts {
		region = region.Union(around(image.Pt(p[0], p[1])))
	}
	return v.c.env.frames.check(v.vmKey(), since, img, region)
}

// Click clicks count times (at most 3) at x, y. With a frame digest in
// since, it refuses (clicking nothing) when the screen around x, y has
// changed since that frame.
func (v *VM) Click(ctx context.Context, x, y int, button string, count int, since string) error {
	b, err := ParseButton(button)
	if err != nil {
		return err
	}
	if count == 0 {
		count = 1
	}
	if count < 1 || count > 3 {
		return Failf("count is 1 (click), 2 (double click) or 3", "count %d is out of range", count)
	}
	return v.input(ctx, inputBudget(0), EffectHID, "a click", func(ctx context.Context, s backends.Screen) error {
		if err := v.checkPoint(ctx, s, since, [2]int{x, y}); err != nil {
			return err
		}
		return inputError(s.Click(ctx, x, y, b, count), "")
	})
}

// Move moves the pointer; since guards the point as Click does (a hover
// can open a menu).
func (v *VM) Move(ctx context.Context, x, y int, since string) error {
	return v.input(ctx, inputBudget(0), EffectHID, "a pointer move", func(ctx context.Context, s backends.Screen) error {
		if err := v.checkPoint(ctx, s, since, [2]int{x, y}); err != nil {
			return err
		}
		return inputError(s.Move(ctx, x, y), "")
	})
}

// Drag drags with the left button from x1,y1 to x2,y2; since guards both
// ends as Click does.
func (v *VM) Drag(ctx context.Context, x1, y1, x2, y2 int, since string) error {
	return v.input(ctx, inputBudget(0), EffectHID, "a drag", func(ctx context.Context, s backends.Screen) error {
		if err := v.checkPoint(ctx, s, since, [2]int{x1, y1}, [2]int{x2, y2}); err != nil {
			return err
		}
		return inputError(s.Drag(ctx, x1, y1, x2, y2), "")
	})
}
