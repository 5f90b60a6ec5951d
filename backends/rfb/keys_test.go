package rfb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// updateGolden regenerates the files under testdata/ instead of comparing.
var updateGolden = os.Getenv("UPDATE_GOLDEN") != ""

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (UPDATE_GOLDEN=1 regenerates it)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestParseCombo(t *testing.T) {
	cases := []struct {
		combo string
		want  []string // name:keysym:scancode
	}{
		{"ret", []string{"ret:ff0d:1c"}},
		{"ctrl-alt-f2", []string{"ctrl:ffe3:1d", "alt:ffe9:38", "f2:ffbf:3c"}},
		{"Ctrl-Alt-Delete", []string{"ctrl:ffe3:1d", "alt:ffe9:38", "delete:ffff:d3"}},
		{"shift-tab", []string{"shift:ffe1:2a", "tab:ff09:f"}},
		{"ctrl-c", []string{"ctrl:ffe3:1d", "c:63:2e"}},
		{"shift-a", []string{"shift:ffe1:2a", "a:41:1e"}}, // upper-case keysym under shift
		{"ctrl_r-alt_r-kp_enter", []string{"ctrl_r:ffe4:9d", "alt_r:ffea:b8", "kp_enter:ff8d:9c"}},
		{"meta_l-print", []string{"meta_l:ffeb:db", "print:ff61:b7"}},
		{"ctrl-minus", []string{"ctrl:ffe3:1d", "minus:2d:c"}},
	}
	for _, tc := range cases {
		keys, err := ParseCombo(tc.combo)
		if err != nil {
			t.Errorf("ParseCombo(%q): %v", tc.combo, err)
			continue
		}
		var got []string
		for _, k := range keys {
			got = append(got, strings.Join([]string{k.Name, hexNoPrefix(k.Keysym), hexNoPrefix(k.Scancode)}, ":"))
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("ParseCombo(%q) = %v, want %v", tc.combo, got, tc.want)
		}
	}
}

func hexNoPrefix(v uint32) string { return strconv.FormatUint(uint64(v), 16) }

func TestParseComboErrors(t *testing.T) {
	cases := map[string]string{
		"entr":       `unknown key "entr" (did you mean ret?)`,
		"enter":      `unknown key "enter" (did you mean ret?)`,
		"ctrl-alt-f": ``, // "f" is a key
		"ctrl-altt":  `unknown key "ctrl-altt": "altt" is not a qemu key name (did you mean ctrl-alt?)`,
		"ctrl--":     `empty key name`,
		"":           `empty key combination`,
		"ctrl-blorp": `unknown key "ctrl-blorp": "blorp" is not a qemu key name (qemu sendkey names: ret,`,
		// The whole combination is named, with every part that is no key.
		"no-such-key": `unknown key "no-such-key": "no", "such" and "key" are not qemu key names (qemu sendkey names:`,
		// A qemu name written with '-' for '_', or an alias inside a combination.
		"caps-lock":      `unknown key "caps-lock": "caps" and "lock" are not qemu key names (did you mean caps_lock?)`,
		"ctrl-kp-enter":  `(did you mean ctrl-kp_enter?)`,
		"ctrl-alt-del":   `unknown key "ctrl-alt-del": "del" is not a qemu key name (did you mean ctrl-alt-delete?)`,
		"ctrl-page-down": `(did you mean ctrl-pgdn?)`,
		"Shift-Entr":     `unknown key "Shift-Entr": "entr" is not a qemu key name (did you mean shift-ret?)`,
	}
	for combo, want := range cases {
		_, err := ParseCombo(combo)
		if want == "" {
			if err != nil {
				t.Errorf("ParseCombo(%q): %v", combo, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCombo(%q) error = %v, want it to contain %q", combo, err, want)
		}
	}
}

func TestKeyTableMatchesQEMUKeymap(t *testing.T) {
	// QEMU ships the key numbers of every QKeyCode in its keymaps; where the
	// file is installed, the table must agree with it.
	data, err := os.ReadFile("/usr/share/qemu/keymaps/en-us")
	if err != nil {
		t.Skip("QEMU's keymaps are not installed: ", err)
	}
	checked := 0
	for _, line := range strings.Split(string(data), "\n") {
		// # evdev 29 (0x1d), QKeyCode "ctrl", number 0x1d
		if !strings.HasPrefix(line, "# evdev") || !strings.Contains(line, `QKeyCode "`) {
			continue
		}
		q := strings.Index(line, `QKeyCode "`)
		rest := line[q+len(`QKeyCode "`):]
		name := rest[:strings.Index(rest, `"`)]
		num := rest[strings.Index(rest, "number ")+len("number "):]
		k, ok := keysByName[name]
		if !ok {
			continue // media and language keys we do not list
		}
		if got := "0x" + hexNoPrefix(k.Scancode); got != num {
			t.Errorf("key %s: scancode %s, QEMU's keymap says %s", name, got, num)
		}
		checked++
	}
	if checked < 100 {
		t.Errorf("checked only %d keys against QEMU's keymap", checked)
	}
}

func TestTextStrokes(t *testing.T) {
	strokes, err := TextStrokes("aZ!\n\t ~\r\nx")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range strokes {
		hold := ""
		if len(s.Hold) > 0 {
			hold = s.Hold[0].Name + "+"
		}
		got = append(got, hold+s.Key.Name+":"+hexNoPrefix(s.Key.Keysym))
	}
	want := "a:61 shift+z:5a shift+1:21 ret:ff0d tab:ff09 spc:20 shift+grave_accent:7e ret:ff0d x:78"
	if strings.Join(got, " ") != want {
		t.Errorf("TextStrokes = %s\nwant          %s", strings.Join(got, " "), want)
	}
	// Every printable ASCII character has a key.
	for r := rune(' '); r <= '~'; r++ {
		if _, err := TextStrokes(string(r)); err != nil {
			t.Errorf("TextStrokes(%q): %v", r, err)
		}
	}
	// The error names the position, never the character: typed text may be
	// a password and the error reaches audit logs.
	for _, c := range []struct {
		text, secret string
		pos          int
	}{{"héllo", "é", 2}, {"日本", "日", 1}, {"a\x00b", "\x00", 2}, {"\x1b", "\x1b", 1}, {"pa\u043fss", "\u043f", 3}} {
		_, err := TextStrokes(c.text)
		want := fmt.Sprintf("character %d of the text is not on the US keyboard layout", c.pos)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("TextStrokes(%q) error = %v, want %q", c.text, err, want)
			continue
		}
		for _, leak := range []string{c.secret, fmt.Sprintf("%q", c.secret), fmt.Sprintf("U+%04X", []rune(c.secret)[0])} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("TextStrokes(%q) error %q quotes the character (%q)", c.text, err, leak)
			}
		}
	}
}

// TestGoldenInputBytes records the exact bytes the client sends for combos
// and text, with and without QEMU's ExtendedKeyEvent, and for the pointer.
func TestGoldenInputBytes(t *testing.T) {
	type action func(ctx context.Context, c *Client) error
	key := func(combo string) action {
		return func(ctx context.Context, c *Client) error { return c.Key(ctx, combo) }
	}
	text := func(s string) action {
		return func(ctx context.Context, c *Client) error { return c.Type(ctx, s) }
	}
	cases := []struct {
		name string
		do   action
	}{
		{"combo-ctrl-alt-f2", key("ctrl-alt-f2")},
		{"combo-shift-tab", key("shift-tab")},
		{"combo-ctrl-alt-delete", key("ctrl-alt-delete")},
		{"combo-alt-f2", key("alt-f2")},
		{"combo-ctrl-c", key("ctrl-c")},
		{"text-hello-world", text("Hello, World!")},
		{"text-a_b-amp-c", text("a_b&c")},
		{"text-symbols", text("`~!@#$%^&*()-_=+[{]}\\|;:'\",<.>/? \t\n")},
		{"text-CAPS-run", text("ABC def")},
		{"pointer-click", func(ctx context.Context, c *Client) error { return c.Click(ctx, 10, 20, 0, 1) }},
		{"pointer-double-right", func(ctx context.Context, c *Client) error { return c.Click(ctx, 5, 6, 2, 2) }},
		{"pointer-drag", func(ctx context.Context, c *Client) error { return c.Drag(ctx, 0, 0, 63, 47) }},
		{"pointer-wheel", func(ctx context.Context, c *Client) error {
			if err := c.Wheel(ctx, 30, 30, -2); err != nil {
				return err
			}
			return c.Wheel(ctx, 30, 30, 1)
		}},
	}
	for _, ext := range []bool{true, false} {
		for _, tc := range cases {
			name := tc.name
			if !ext {
				if strings.HasPrefix(name, "pointer") {
					continue
				}
				name += "-keysym"
			}
			t.Run(name, func(t *testing.T) {
				srv := newFakeServer(t)
				srv.extKeys = ext
				c := connect(t, Config{Dial: srv.dial, KeyDelay: -1})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := tc.do(ctx, c); err != nil {
					t.Fatal(err)
				}
				c.Close()
				checkGolden(t, name+".txt", describe(srv.finished()))
			})
		}
	}
}

func TestUnknownInputSendsNothing(t *testing.T) {
	srv := newFakeServer(t)
	c := connect(t, Config{Dial: srv.dial, KeyDelay: -1})
	ctx := context.Background()
	if err := c.Key(ctx, "ctrl-entr"); err == nil || !strings.Contains(err.Error(), "did you mean ctrl-ret?") {
		t.Errorf("Key(ctrl-entr) = %v", err)
	}
	if err := c.Type(ctx, "abc é"); err == nil || !strings.Contains(err.Error(), "nothing was typed") {
		t.Errorf("Type = %v", err)
	}
	if err := c.Click(ctx, 64, 0, 0, 1); err == nil || !strings.Contains(err.Error(), "outside the 64x48 screen") {
		t.Errorf("Click outside = %v", err)
	}
	if err := c.Move(ctx, -1, 0); err == nil {
		t.Error("Move(-1, 0) succeeded")
	}
	if err := c.Drag(ctx, 0, 0, 0, 48); err == nil {
		t.Error("Drag to y=48 succeeded")
	}
	// A marker proves the connection works and that nothing came before it.
	if err := c.Key(ctx, "esc"); err != nil {
		t.Fatal(err)
	}
	got := srv.waitInput(t, 2)
	if len(got) != 2 || !strings.Contains(describe(got), "esc") {
		t.Errorf("server received:\n%s", describe(got))
	}
}

// Every move changes both axes on its last event, also at the screen's
// edges (the step goes inward there).
func TestMoveToChangesBothAxes(t *testing.T) {
	for _, p := range [][2]int{{0, 0}, {10, 20}, {63, 47}, {63, 0}, {0, 47}} {
		ev := moveTo(p[0], p[1], 64, 48, 0)
		step, at := ev[0], ev[1]
		if at.x != p[0] || at.y != p[1] || step.x == at.x || step.y == at.y || step.x < 0 || step.x >= 64 || step.y < 0 || step.y >= 48 {
			t.Errorf("moveTo(%v) = step (%d,%d), then (%d,%d)", p, step.x, step.y, at.x, at.y)
		}
		if step.pause == 0 {
			t.Errorf("moveTo(%v): no pause after the step, so QEMU may merge it with the move", p)
		}
	}
}
