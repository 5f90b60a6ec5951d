package kvmdtest

import (
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// hid is kvmd's HID plugin with an OTG keyboard and absolute mouse: events
// go into one queue, in order, and on to the machine as fast as QMP takes
// them. Nothing paces them to the machine's USB polling: that is the
// client's business, as it is on a real PiKVM (hid/print at speed loses
// characters on real targets too).
type hid struct {
	s       *Server
	events  chan []any // QMP input-send-event event lists
	done    chan struct{}
	once    sync.Once
	pending sync.WaitGroup // events queued and not yet sent
}

func newHID(s *Server) *hid {
	h := &hid{s: s, events: make(chan []any, 1<<16), done: make(chan struct{})}
	go h.pump()
	return h
}

func (h *hid) pump() {
	defer close(h.done)
	for evs := range h.events {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.s.vm.Execute(ctx, "input-send-event", map[string]any{"events": evs}, nil); err != nil {
			h.s.log.Info("kvmdtest: hid event lost", "err", err)
		}
		cancel()
		h.pending.Done()
	}
}

func (h *hid) close() {
	h.once.Do(func() { close(h.events) })
	<-h.done
}

func (h *hid) queue(evs ...any) {
	h.pending.Add(1)
	defer func() {
		if recover() != nil { // closed at shutdown: the event is dropped
			h.pending.Done()
		}
	}()
	h.events <- evs
}

func (h *hid) key(code string, down bool) {
	h.queue(map[string]any{"type": "key", "data": map[string]any{"down": down, "key": map[string]any{"type": "qcode", "data": webToQcode[code]}}})
}

// sendKeyEvent is BaseHid.send_key_event: with finish, a key is released
// right after its press, except modifiers and PrintScreen, which stay down.
func (h *hid) sendKeyEvent(code string, state, finish bool) {
	h.key(code, state)
	if state && finish && !modifiers[code] && code != "PrintScreen" {
		h.key(code, false)
	}
}

func (h *hid) state(http.ResponseWriter, *http.Request) (any, error) {
	outputs := map[string]any{"available": []string{}, "active": ""}
	return map[string]any{
		"enabled": true, "online": true, "busy": false, "connected": nil,
		"keyboard": map[string]any{"online": true, "leds": map[string]bool{"caps": false, "scroll": false, "num": false}, "outputs": outputs},
		"mouse":    map[string]any{"online": true, "absolute": true, "outputs": outputs},
		"jiggler":  map[string]any{"enabled": false, "active": false, "interval": 60},
	}, nil
}

func validKey(r *http.Request, name string) (string, error) {
	v := queryString(r, name)
	if v == nil {
		return "", validatorError(nil, "Keyboard key")
	}
	if _, ok := webToQcode[*v]; !ok {
		return "", validatorError(*v, "Keyboard key")
	}
	return *v, nil
}

func (h *hid) sendKey(_ http.ResponseWriter, r *http.Request) (any, error) {
	key, err := validKey(r, "key")
	if err != nil {
		return nil, err
	}
	if !r.URL.Query().Has("state") {
		h.sendKeyEvent(key, true, true)
		return nil, nil
	}
	state, err := queryBool(r, "state", false)
	if err != nil {
		return nil, err
	}
	finish, err := queryBool(r, "finish", false)
	if err != nil {
		return nil, err
	}
	h.sendKeyEvent(key, state, finish)
	return nil, nil
}

// sendShortcut presses keys in order and releases them reversed, 50 ms
// between events.
func (h *hid) sendShortcut(_ http.ResponseWriter, r *http.Request) (any, error) {
	v := queryString(r, "keys")
	if v == nil {
		return nil, validatorError(nil, "string list")
	}
	var keys []string
	for _, k := range strings.FieldsFunc(*v, func(c rune) bool { return c == ',' || c == ' ' || c == '\t' }) {
		if _, ok := webToQcode[k]; !ok {
			return nil, validatorError(k, "Keyboard key")
		}
		keys = append(keys, k)
	}
	var seq []keyEvent
	for _, k := range keys {
		seq = append(seq, keyEvent{k, true})
	}
	for i := len(keys) - 1; i >= 0; i-- {
		seq = append(seq, keyEvent{keys[i], false})
	}
	return nil, h.sendKeyEvents(r.Context(), seq, 50*time.Millisecond)
}

type keyEvent struct {
	code string
	down bool
}

// sendKeyEvents is BaseHid.send_key_events: a sleep of delay before each.
func (h *hid) sendKeyEvents(ctx context.Context, seq []keyEvent, delay time.Duration) error {
	for _, e := range seq {
		if delay > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(delay):
			}
		}
		h.sendKeyEvent(e.code, e.down, false)
	}
	return nil
}

// print is /hid/print: the body is the text; limit (default 1024) cuts it;
// delay (0..5 s, or slow=1 for 0.02 s) sleeps before every key event.
func (h *hid) print(_ http.ResponseWriter, r *http.Request) (any, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	text := []rune(string(body))
	limit := 1024
	if v := queryString(r, "limit"); v != nil {
		n, err := strconv.Atoi(*v)
		if err != nil || n < 0 {
			return nil, validatorError(*v, "int")
		}
		limit = n
	}
	if limit > 0 && len(text) > limit {
		text = text[:limit]
	}
	if v := queryString(r, "keymap"); v != nil && *v != "en-us" {
		return nil, validatorError(*v, "keymap")
	}
	slow := false
	if h.s == nil || h.s.atLeast(4, 25) {
		var err error
		if slow, err = queryBool(r, "slow", false); err != nil {
			return nil, err
		}
	}
	delay := 0.0
	if slow {
		delay = 0.02
	}
	if v := queryString(r, "delay"); v != nil && (h.s == nil || h.s.atLeast(4, 93)) {
		d, err := strconv.ParseFloat(*v, 64)
		switch {
		case err != nil || math.IsNaN(d):
			return nil, validatorError(*v, "keys delay")
		case d < 0:
			return nil, fail(400, "ValidatorError", "The argument '%v' must be keys delay and greater or equial than 0", *v)
		case d > 5:
			return nil, fail(400, "ValidatorError", "The argument '%v' must be keys delay and lesser or equal then 5", *v)
		}
		delay = d
	}
	return nil, h.sendKeyEvents(r.Context(), textToKeys(text), time.Duration(delay*float64(time.Second)))
}

// textToKeys is kvmd's text_to_evdev_keys on the en-us keymap: Shift held
// across a run of shifted characters, typographic quotes and dashes
// folded to ASCII, and every other character the keymap lacks dropped
// silently.
func textToKeys(text []rune) []keyEvent {
	var out []keyEvent
	shift := false
	emit := func(code string, shifted bool) {
		if shifted != shift {
			out = append(out, keyEvent{"ShiftLeft", shifted})
			shift = shifted
		}
		out = append(out, keyEvent{code, true}, keyEvent{code, false})
	}
	for _, ch := range text {
		switch ch {
		case '\n':
			emit("Enter", false)
			continue
		case '\t':
			emit("Tab", false)
			continue
		case ' ':
			emit("Space", false)
			continue
		case '‚', '‘', '’':
			ch = '\''
		case '„', '“', '”':
			ch = '"'
		case '–':
			ch = '-'
		case '—':
			emit("Minus", false)
			ch = '-'
		}
		if !unicode.IsPrint(ch) {
			continue
		}
		if k, ok := usKeys[ch]; ok {
			emit(k.code, k.shift)
		}
	}
	if shift {
		out = append(out, keyEvent{"ShiftLeft", false})
	}
	return out
}

type usKey struct {
	code  string
	shift bool
}

// usKeys is the en-us keymap: character -> key and whether Shift is held.
var usKeys = func() map[rune]usKey {
	m := map[rune]usKey{}
	for c := 'a'; c <= 'z'; c++ {
		code := "Key" + string(unicode.ToUpper(c))
		m[c] = usKey{code, false}
		m[unicode.ToUpper(c)] = usKey{code, true}
	}
	for c := '0'; c <= '9'; c++ {
		m[c] = usKey{"Digit" + string(c), false}
	}
	for i, c := range ")!@#$%^&*(" {
		m[c] = usKey{"Digit" + strconv.Itoa(i), true}
	}
	for _, p := range []struct {
		plain, shifted rune
		code           string
	}{
		{'-', '_', "Minus"}, {'=', '+', "Equal"}, {'[', '{', "BracketLeft"}, {']', '}', "BracketRight"},
		{'\\', '|', "Backslash"}, {';', ':', "Semicolon"}, {'\'', '"', "Quote"}, {'`', '~', "Backquote"},
		{',', '<', "Comma"}, {'.', '>', "Period"}, {'/', '?', "Slash"},
	} {
		m[p.plain] = usKey{p.code, false}
		m[p.shifted] = usKey{p.code, true}
	}
	return m
}()

// --- mouse ---------------------------------------------------------------------------------------------------

func queryInt(r *http.Request, name, what string, lo, hi int) (int, error) {
	v := queryString(r, name)
	if v == nil || *v == "" {
		return 0, validatorError(nil, what)
	}
	s := *v
	base := 10
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		s, base = s[2:], 16
	}
	n, err := strconv.ParseInt(s, base, 64)
	if err != nil {
		return 0, validatorError(*v, what)
	}
	return int(min(max(n, int64(lo)), int64(hi))), nil // kvmd clamps (MouseRange.normalize)
}

// toQEMU maps kvmd's -32768..32767 onto QEMU's absolute axis 0..32767 with
// kvmd's tools.remap.
func toQEMU(v int) int {
	return int(math.Round(float64(v+32768) * 32767 / 65535))
}

func (h *hid) sendMouseMove(_ http.ResponseWriter, r *http.Request) (any, error) {
	x, err := queryInt(r, "to_x", "Mouse move", -32768, 32767)
	if err != nil {
		return nil, err
	}
	y, err := queryInt(r, "to_y", "Mouse move", -32768, 32767)
	if err != nil {
		return nil, err
	}
	h.move(x, y)
	return nil, nil
}

func (h *hid) move(x, y int) {
	h.queue(
		map[string]any{"type": "abs", "data": map[string]any{"axis": "x", "value": toQEMU(x)}},
		map[string]any{"type": "abs", "data": map[string]any{"axis": "y", "value": toQEMU(y)}})
}

// mouseButtons maps kvmd's buttons onto QEMU's (up/down are the back and
// forward side buttons).
var mouseButtons = map[string]string{"left": "left", "right": "right", "middle": "middle", "up": "side", "down": "extra"}

func (h *hid) button(b string, down bool) {
	h.queue(map[string]any{"type": "btn", "data": map[string]any{"down": down, "button": mouseButtons[b]}})
}

func (h *hid) sendMouseButton(_ http.ResponseWriter, r *http.Request) (any, error) {
	v := queryString(r, "button")
	if v == nil {
		return nil, validatorError(nil, "Mouse button")
	}
	b := strings.ToLower(*v)
	if _, ok := mouseButtons[b]; !ok {
		return nil, validatorError(b, "Mouse button")
	}
	if !r.URL.Query().Has("state") {
		h.button(b, true)
		h.button(b, false)
		return nil, nil
	}
	state, err := queryBool(r, "state", false)
	if err != nil {
		return nil, err
	}
	h.button(b, state)
	return nil, nil
}

func deltas(r *http.Request) (int, int, error) {
	dx, err := queryInt(r, "delta_x", "Mouse delta", -127, 127)
	if err != nil {
		return 0, 0, err
	}
	dy, err := queryInt(r, "delta_y", "Mouse delta", -127, 127)
	return dx, dy, err
}

// sendMouseWheel scrolls: a positive delta_y is up (HID's sign), each unit
// one notch of QEMU's wheel buttons.
func (h *hid) sendMouseWheel(_ http.ResponseWriter, r *http.Request) (any, error) {
	dx, dy, err := deltas(r)
	if err != nil {
		return nil, err
	}
	h.wheel(dx, dy)
	return nil, nil
}

func (h *hid) wheel(dx, dy int) {
	notch := func(b string, n int) {
		for range n {
			h.queue(map[string]any{"type": "btn", "data": map[string]any{"down": true, "button": b}})
			h.queue(map[string]any{"type": "btn", "data": map[string]any{"down": false, "button": b}})
		}
	}
	switch {
	case dy > 0:
		notch("wheel-up", dy)
	case dy < 0:
		notch("wheel-down", -dy)
	}
	switch {
	case dx > 0:
		notch("wheel-right", dx)
	case dx < 0:
		notch("wheel-left", -dx)
	}
}

func (h *hid) sendMouseRelative(_ http.ResponseWriter, r *http.Request) (any, error) {
	dx, dy, err := deltas(r)
	if err != nil {
		return nil, err
	}
	h.queue(
		map[string]any{"type": "rel", "data": map[string]any{"axis": "x", "value": dx}},
		map[string]any{"type": "rel", "data": map[string]any{"axis": "y", "value": dy}})
	return nil, nil
}

// --- keys ------------------------------------------------------------------------------------------------------

var modifiers = map[string]bool{
	"ControlLeft": true, "ShiftLeft": true, "AltLeft": true, "MetaLeft": true,
	"ControlRight": true, "ShiftRight": true, "AltRight": true, "MetaRight": true,
}

// webToQcode maps kvmd's key names (KeyboardEvent.code, kvmd's
// WEB_TO_EVDEV) to QEMU's QKeyCode.
var webToQcode = func() map[string]string {
	m := map[string]string{
		"Enter": "ret", "Escape": "esc", "Backspace": "backspace", "Tab": "tab", "Space": "spc",
		"Minus": "minus", "Equal": "equal", "BracketLeft": "bracket_left", "BracketRight": "bracket_right",
		"Backslash": "backslash", "Semicolon": "semicolon", "Quote": "apostrophe", "Backquote": "grave_accent",
		"Comma": "comma", "Period": "dot", "Slash": "slash", "CapsLock": "caps_lock",
		"PrintScreen": "sysrq", "Insert": "insert", "Home": "home", "PageUp": "pgup", "Delete": "delete",
		"End": "end", "PageDown": "pgdn", "ArrowRight": "right", "ArrowLeft": "left", "ArrowDown": "down",
		"ArrowUp": "up", "ControlLeft": "ctrl", "ShiftLeft": "shift", "AltLeft": "alt", "MetaLeft": "meta_l",
		"ControlRight": "ctrl_r", "ShiftRight": "shift_r", "AltRight": "alt_r", "MetaRight": "meta_r",
		"Pause": "pause", "ScrollLock": "scroll_lock", "NumLock": "num_lock", "ContextMenu": "menu",
		"NumpadDivide": "kp_divide", "NumpadMultiply": "kp_multiply", "NumpadSubtract": "kp_subtract",
		"NumpadAdd": "kp_add", "NumpadEnter": "kp_enter", "NumpadDecimal": "kp_decimal", "Power": "power",
		"IntlBackslash": "less", "IntlYen": "yen", "IntlRo": "ro", "KanaMode": "katakanahiragana",
		"Convert": "henkan", "NonConvert": "muhenkan", "AudioVolumeMute": "audiomute",
		"AudioVolumeUp": "volumeup", "AudioVolumeDown": "volumedown",
	}
	for c := 'A'; c <= 'Z'; c++ {
		m["Key"+string(c)] = string(unicode.ToLower(c))
	}
	for c := '0'; c <= '9'; c++ {
		m["Digit"+string(c)] = string(c)
		m["Numpad"+string(c)] = "kp_" + string(c)
	}
	for i := 1; i <= 24; i++ {
		m["F"+strconv.Itoa(i)] = "f" + strconv.Itoa(i)
	}
	return m
}()
