package pikvm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/rfb"
)

// printChunk is how many characters one /hid/print carries: well under
// kvmd's default limit of 1024, and short enough (about 2 s at the default
// pace) that a cancelled call stops soon.
const printChunk = 64

// webKeys maps qemu sendkey names to kvmd's key names (browser
// KeyboardEvent.code, kvmd's WEB_TO_EVDEV).
var webKeys = func() map[string]string {
	m := map[string]string{
		"ret": "Enter", "esc": "Escape", "backspace": "Backspace", "tab": "Tab", "spc": "Space",
		"minus": "Minus", "equal": "Equal", "bracket_left": "BracketLeft", "bracket_right": "BracketRight",
		"backslash": "Backslash", "semicolon": "Semicolon", "apostrophe": "Quote", "grave_accent": "Backquote",
		"comma": "Comma", "dot": "Period", "slash": "Slash", "caps_lock": "CapsLock",
		"print": "PrintScreen", "sysrq": "PrintScreen", // kvmd sends Alt+SysRq as Alt+PrintScreen
		"insert": "Insert", "home": "Home", "pgup": "PageUp", "delete": "Delete", "end": "End", "pgdn": "PageDown",
		"right": "ArrowRight", "left": "ArrowLeft", "down": "ArrowDown", "up": "ArrowUp",
		"ctrl": "ControlLeft", "shift": "ShiftLeft", "alt": "AltLeft", "meta_l": "MetaLeft",
		"ctrl_r": "ControlRight", "shift_r": "ShiftRight", "alt_r": "AltRight", "meta_r": "MetaRight",
		"pause": "Pause", "scroll_lock": "ScrollLock", "num_lock": "NumLock", "menu": "ContextMenu", "compose": "ContextMenu",
		"kp_divide": "NumpadDivide", "kp_multiply": "NumpadMultiply", "asterisk": "NumpadMultiply",
		"kp_subtract": "NumpadSubtract", "kp_add": "NumpadAdd", "kp_enter": "NumpadEnter", "kp_decimal": "NumpadDecimal",
		"power": "Power", "less": "IntlBackslash", "yen": "IntlYen", "ro": "IntlRo",
		"katakanahiragana": "KanaMode", "hiragana": "KanaMode", "henkan": "Convert", "muhenkan": "NonConvert",
		"audiomute": "AudioVolumeMute", "volumeup": "AudioVolumeUp", "volumedown": "AudioVolumeDown",
	}
	for c := 'a'; c <= 'z'; c++ {
		m[string(c)] = "Key" + strings.ToUpper(string(c))
	}
	for c := '0'; c <= '9'; c++ {
		m[string(c)] = "Digit" + string(c)
		m["kp_"+string(c)] = "Numpad" + string(c)
	}
	for i := 1; i <= 12; i++ {
		m["f"+strconv.Itoa(i)] = "F" + strconv.Itoa(i)
	}
	return m
}()

// comboKeys turns a qemu sendkey combination into kvmd key names, in the
// order they are pressed.
func comboKeys(combo string) ([]string, error) {
	keys, err := rfb.ParseCombo(combo)
	if err != nil {
		return nil, fmt.Errorf("pikvm: %w", err)
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		code, ok := webKeys[k.Name]
		if !ok {
			return nil, fmt.Errorf("pikvm: key %q has no USB keyboard equivalent on a PiKVM", k.Name)
		}
		out[i] = code
	}
	return out, nil
}

// sleep pauses for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// keyEvent presses (down) or releases one key, explicitly: kvmd's
// send_key without state leaves modifiers held.
func (s *screen) keyEvent(ctx context.Context, code string, down bool) error {
	state := "false"
	if down {
		state = "true"
	}
	return s.b.call(ctx, "key "+code, "POST", "/hid/events/send_key", url.Values{"key": {code}, "state": {state}}, nil, nil)
}

// releaseAll lets go of held keys even when ctx has ended: a modifier left
// down on a real machine breaks everything typed after it.
func (s *screen) releaseAll(ctx context.Context, held []string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for i := len(held) - 1; i >= 0; i-- {
		if err := s.keyEvent(rctx, held[i], false); err != nil {
			s.b.log.Warn("pikvm: releasing a key failed", "key", held[i], "err", err)
		}
	}
}

// Key presses a combination: each key down in order, then up in reverse,
// paced by KeyDelay.
func (s *screen) Key(ctx context.Context, combo string) error {
	codes, err := comboKeys(combo)
	if err != nil {
		return err
	}
	if _, err := s.ensureStream(ctx); err != nil {
		return err
	}
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	var held []string
	for i, code := range codes {
		if i > 0 {
			if err := sleep(ctx, s.b.keyDelay); err != nil {
				s.releaseAll(ctx, held)
				return err
			}
		}
		if err := s.keyEvent(ctx, code, true); err != nil {
			s.releaseAll(ctx, held)
			return err
		}
		held = append(held, code)
	}
	for i := len(held) - 1; i >= 0; i-- {
		if err := sleep(ctx, s.b.keyDelay); err == nil {
			err = s.keyEvent(ctx, held[i], false)
		}
		if err != nil {
			s.releaseAll(ctx, held[:i+1])
			return err
		}
	}
	return nil
}

// printText checks text for the US layout and answers what /hid/print
// should get: kvmd drops any character its keymap lacks, silently, so
// nothing is sent when one is not typable. "\r\n" and "\r" become "\n".
func printText(text string) ([]rune, error) {
	strokes, err := rfb.TextStrokes(text)
	if err != nil {
		return nil, fmt.Errorf("pikvm: %w; nothing was typed", err)
	}
	out := make([]rune, len(strokes))
	for i, st := range strokes {
		out[i] = st.Char
		if st.Char == '\r' {
			out[i] = '\n'
		}
	}
	return out, nil
}

// Type types text at KeyDelay per key event, with Shift held across a run
// of shifted characters. kvmd 4.93 and later pace /hid/print themselves
// (its delay parameter): the text goes in chunks. Older ones would send it
// as fast as they can (they ignore delay, and the machine loses what it
// cannot take), so there the keys go one by one, paced here.
func (s *screen) Type(ctx context.Context, text string) error {
	runes, err := printText(text)
	if err != nil {
		return err
	}
	if _, err := s.ensureStream(ctx); err != nil {
		return err
	}
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	if s.b.printPaced(ctx) {
		return s.print(ctx, runes)
	}
	return s.typeKeys(ctx, text)
}

// print sends the text to /hid/print on the en-us keymap, in chunks.
func (s *screen) print(ctx context.Context, runes []rune) error {
	q := url.Values{
		"keymap": {"en-us"},
		"limit":  {"0"},
		"delay":  {strconv.FormatFloat(s.b.keyDelay.Seconds(), 'f', -1, 64)},
	}
	for sent := 0; sent < len(runes); {
		n := min(printChunk, len(runes)-sent)
		chunk := string(runes[sent : sent+n])
		err := s.b.call(ctx, "type", "POST", "/hid/print", q, strings.NewReader(chunk), nil)
		if err != nil {
			if sent > 0 {
				return fmt.Errorf("%w (%d of %d characters were typed)", err, sent, len(runes))
			}
			return err
		}
		sent += n
	}
	return nil
}

// typeKeys types the text key event by key event, KeyDelay before each.
func (s *screen) typeKeys(ctx context.Context, text string) error {
	strokes, err := rfb.TextStrokes(text)
	if err != nil {
		return fmt.Errorf("pikvm: %w; nothing was typed", err)
	}
	var held []string // Shift, across a run of shifted characters
	step := func(code string, down bool) error {
		if err := sleep(ctx, s.b.keyDelay); err != nil {
			return err
		}
		return s.keyEvent(ctx, code, down)
	}
	for i, st := range strokes {
		var want []string
		for _, k := range st.Hold {
			want = append(want, webKeys[k.Name])
		}
		err := func() error {
			if strings.Join(held, ",") != strings.Join(want, ",") {
				for len(held) > 0 {
					if err := step(held[len(held)-1], false); err != nil {
						return err
					}
					held = held[:len(held)-1]
				}
				for _, code := range want {
					if err := step(code, true); err != nil {
						return err
					}
					held = append(held, code)
				}
			}
			code := webKeys[st.Key.Name]
			if err := step(code, true); err != nil {
				return err
			}
			if err := step(code, false); err != nil {
				s.releaseAll(ctx, []string{code})
				return err
			}
			return nil
		}()
		if err != nil {
			s.releaseAll(ctx, held)
			if i > 0 {
				return fmt.Errorf("%w (%d of %d characters were typed)", err, i, len(strokes))
			}
			return err
		}
	}
	for len(held) > 0 {
		if err := step(held[len(held)-1], false); err != nil {
			s.releaseAll(ctx, held)
			return err
		}
		held = held[:len(held)-1]
	}
	return nil
}

// --- mouse ------------------------------------------------------------------------------------------------------

// toKVMD maps a pixel of the real frame onto kvmd's absolute range as
// kvmd's web UI does (tools.remap onto -32768..32767).
func toKVMD(p, size int) int {
	if size <= 1 {
		return 0
	}
	v := int(math.Round(float64(p)*65535/float64(size-1))) - 32768
	return min(max(v, -32768), 32767)
}

func (s *screen) checkPoint(ctx context.Context, x, y int) (int, int, error) {
	w, h, err := s.size(ctx)
	if err != nil {
		return 0, 0, err
	}
	if x < 0 || y < 0 || x >= w || y >= h {
		return 0, 0, fmt.Errorf("pikvm: point %d,%d is outside the %dx%d screen", x, y, w, h)
	}
	return toKVMD(x, w), toKVMD(y, h), nil
}

func (s *screen) moveTo(ctx context.Context, x, y int) error {
	kx, ky, err := s.checkPoint(ctx, x, y)
	if err != nil {
		return err
	}
	return s.b.call(ctx, "mouse move", "POST", "/hid/events/send_mouse_move",
		url.Values{"to_x": {strconv.Itoa(kx)}, "to_y": {strconv.Itoa(ky)}}, nil, nil)
}

// place puts the pointer at x, y with both axes set: the step
// (backends.StepFrom), PointerSettle, then the point. A PiKVM's USB mouse
// reports both axes, but the guest's kernel still drops one that did not
// change; the pause lets the machine read the step before the point
// replaces it.
func (s *screen) place(ctx context.Context, x, y int) error {
	if _, _, err := s.checkPoint(ctx, x, y); err != nil {
		return err
	}
	w, h, err := s.size(ctx)
	if err != nil {
		return err
	}
	sx, sy := backends.StepFrom(x, y, w, h)
	if err := s.moveTo(ctx, sx, sy); err != nil {
		return err
	}
	if err := sleep(ctx, backends.PointerSettle); err != nil {
		return err
	}
	return s.moveTo(ctx, x, y)
}

func buttonName(b backends.Button) (string, error) {
	switch b {
	case backends.Left:
		return "left", nil
	case backends.Middle:
		return "middle", nil
	case backends.Right:
		return "right", nil
	}
	return "", fmt.Errorf("pikvm: unknown mouse button %d", b)
}

func (s *screen) button(ctx context.Context, name string, down bool) error {
	return s.b.call(ctx, "mouse button", "POST", "/hid/events/send_mouse_button",
		url.Values{"button": {name}, "state": {strconv.FormatBool(down)}}, nil, nil)
}

// releaseButton lets go of a button even when ctx has ended.
func (s *screen) releaseButton(ctx context.Context, name string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.button(rctx, name, false); err != nil {
		s.b.log.Warn("pikvm: releasing a mouse button failed", "button", name, "err", err)
	}
}

// Move moves the pointer to x, y of the frame.
func (s *screen) Move(ctx context.Context, x, y int) error {
	if _, err := s.ensureStream(ctx); err != nil {
		return err
	}
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	return s.place(ctx, x, y)
}

// Click moves and clicks count times: a single click holds the button
// 300 ms; a double (or triple) holds each press 50 ms, 50 ms apart, inside
// the desktop's double-click interval.
func (s *screen) Click(ctx context.Context, x, y int, b backends.Button, count int) error {
	name, err := buttonName(b)
	if err != nil {
		return err
	}
	if count < 1 || count > 10 {
		return fmt.Errorf("pikvm: click count %d is out of range 1..10", count)
	}
	if _, err := s.ensureStream(ctx); err != nil {
		return err
	}
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	if err := s.place(ctx, x, y); err != nil {
		return err
	}
	hold, gap := backends.ClickHold, time.Duration(0)
	if count > 1 {
		hold, gap = backends.MultiClickHold, backends.MultiClickGap
	}
	if err := sleep(ctx, backends.PointerSettle); err != nil {
		return err
	}
	for i := range count {
		if i > 0 {
			if err := sleep(ctx, gap); err != nil {
				return err
			}
		}
		if err := s.button(ctx, name, true); err != nil {
			return err
		}
		err := sleep(ctx, hold)
		if err == nil {
			err = s.button(ctx, name, false)
		}
		if err != nil {
			s.releaseButton(ctx, name)
			return err
		}
	}
	return nil
}

// Drag presses the left button at x1, y1, moves to x2, y2 in steps and
// releases there.
func (s *screen) Drag(ctx context.Context, x1, y1, x2, y2 int) error {
	if _, err := s.ensureStream(ctx); err != nil {
		return err
	}
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	if _, _, err := s.checkPoint(ctx, x2, y2); err != nil {
		return err
	}
	if err := s.place(ctx, x1, y1); err != nil {
		return err
	}
	if err := sleep(ctx, backends.PointerSettle); err != nil {
		return err
	}
	if err := s.button(ctx, "left", true); err != nil {
		return err
	}
	err := func() error {
		if err := sleep(ctx, backends.DragHold); err != nil {
			return err
		}
		steps := min(max(int(math.Hypot(float64(x2-x1), float64(y2-y1))/20), 5), 30)
		for i := 1; i <= steps; i++ {
			if err := s.moveTo(ctx, x1+(x2-x1)*i/steps, y1+(y2-y1)*i/steps); err != nil {
				return err
			}
			pause := backends.DragStepPause
			if i == steps {
				pause = backends.DragHold
			}
			if err := sleep(ctx, pause); err != nil {
				return err
			}
		}
		return s.button(ctx, "left", false)
	}()
	if err != nil {
		s.releaseButton(ctx, "left")
	}
	return err
}

// Wheel scrolls at x, y: negative steps up, positive down, one notch per
// event (kvmd's wheel delta is HID's: positive is up).
func (s *screen) Wheel(ctx context.Context, x, y, steps int) error {
	if steps < -100 || steps > 100 {
		return errors.New("pikvm: wheel steps must be within -100..100")
	}
	if _, err := s.ensureStream(ctx); err != nil {
		return err
	}
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	if err := s.place(ctx, x, y); err != nil {
		return err
	}
	delta := "-1"
	if steps < 0 {
		delta, steps = "1", -steps
	}
	for range steps {
		if err := sleep(ctx, backends.WheelPause); err != nil {
			return err
		}
		if err := s.b.call(ctx, "mouse wheel", "POST", "/hid/events/send_mouse_wheel",
			url.Values{"delta_x": {"0"}, "delta_y": {delta}}, nil, nil); err != nil {
			return err
		}
	}
	return nil
}
