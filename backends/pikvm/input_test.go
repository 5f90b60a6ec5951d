package pikvm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pikvm/kvmdtest"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/backends/rfb"
)

// typeIntoCat types text into `cat > path` on the guest's tty1 shell and
// answers what the file got: the text arrives through the tty exactly as
// typed, so any lost or changed character shows. It answers how long the
// typing itself took.
func typeIntoCat(t testing.TB, s *screen, a *qga.Client, path, text string) (string, time.Duration) {
	return typeIntoCatWith(t, nil, s, s, a, path, text)
}

// typeIntoCatWith types the text with typist and everything around it with
// ctl. When they differ (a typist that may lose events), ctl then releases
// every key the text uses (a lost release leaves a key down) and ends the
// line, and an empty last line that adds is dropped from the answer.
func typeIntoCatWith(t testing.TB, srv *kvmdtest.Server, ctl, typist *screen, a *qga.Client, path, text string) (string, time.Duration) {
	t.Helper()
	ctx := testContext(t)
	if err := ctl.Key(ctx, "ctrl-c"); err != nil { // a clean prompt line
		t.Fatal(seen(err))
	}
	if err := ctl.Type(ctx, "cat >"+path+"\n"); err != nil {
		t.Fatal(seen(err))
	}
	// cat, not the shell's line editor, must read the text.
	if err := eventually(ctx, func() bool { out, _ := guest(ctx, a, "pidof cat"); return strings.TrimSpace(out) != "" }); err != nil {
		t.Fatalf("cat did not start on tty1: %s", mustGuest(t, a, "ls -l /tmp"))
	}
	start := time.Now()
	if err := typist.Type(ctx, text); err != nil {
		t.Fatal(seen(err))
	}
	took := time.Since(start)
	if typist != ctl {
		// Let the burst drain: the fake's queue, then QEMU's keyboard
		// queue (16 codes, polled every 10 ms), or the releases are lost too.
		srv.WaitHID()
		time.Sleep(300 * time.Millisecond)
		strokes, _ := rfb.TextStrokes(text)
		codes := map[string]bool{"ShiftLeft": true}
		for _, st := range strokes {
			codes[webKeys[st.Key.Name]] = true
		}
		for code := range codes {
			if err := ctl.keyEvent(ctx, code, false); err != nil {
				t.Fatal(seen(err))
			}
			time.Sleep(ctl.b.keyDelay)
		}
		if err := ctl.Key(ctx, "ret"); err != nil {
			t.Fatal(seen(err))
		}
	}
	if err := ctl.Key(ctx, "ctrl-d"); err != nil {
		t.Fatal(seen(err))
	}
	if err := eventually(ctx, func() bool { out, _ := guest(ctx, a, "pidof cat"); return strings.TrimSpace(out) == "" }); err != nil {
		t.Fatal("cat did not end at ctrl-d")
	}
	data, _, err := a.ReadFile(ctx, path, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	guest(ctx, a, "rm -f "+path)
	got := string(data)
	if typist != ctl && strings.HasSuffix(got, "\n\n") {
		got = got[:len(got)-1]
	}
	return got, took
}

// printableText is every printable ASCII character, in order and reversed,
// a pangram and a tab: lines the US keymap types in full.
func printableText() string {
	var fwd, rev strings.Builder
	for c := ' '; c <= '~'; c++ {
		fwd.WriteRune(c)
	}
	for c := '~'; c >= ' '; c-- {
		rev.WriteRune(c)
	}
	return fwd.String() + "\n" + rev.String() + "\nThe quick brown fox\tjumps over THE LAZY DOG 0123456789!\n"
}

// Typed text reaches the guest with no character lost or changed.
func TestTypeReachesGuest(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	text := printableText()
	got, took := typeIntoCat(t, s, agent, "/tmp/typed", text)
	if got != text {
		t.Fatalf("the guest got\n%q\nwant\n%q", got, text)
	}
	t.Logf("%d characters intact in %v: %.1f chars/s", len(text), took.Round(time.Millisecond), float64(len(text))/took.Seconds())
	for _, c := range srv.Calls() {
		if strings.HasPrefix(c, "POST /api/hid/print") && (!strings.Contains(c, "keymap=en-us") || !strings.Contains(c, "delay=0.012")) {
			t.Errorf("print call %q: want keymap=en-us and delay=0.012", c)
		}
	}
}

// Characters the US layout cannot type fail the call before anything is
// sent (kvmd would drop them silently), without naming them.
func TestTypeRefusesUntypable(t *testing.T) {
	vm, _ := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	before := len(srv.Calls())
	err := s.Type(testContext(t), "pässwörd")
	text := seen(err)
	if err == nil || !strings.Contains(text, "character 2") || strings.Contains(text, "ä") {
		t.Fatalf("typing a non-US character answered %v", text)
	}
	if n := len(srv.Calls()) - before; n != 0 {
		t.Errorf("%d requests were sent for an untypable text", n)
	}
}

// A combination presses its modifiers and releases them: ctrl-alt-f2
// switches the guest to tty2, ctrl-alt-f1 back, and typing afterwards is
// plain (no modifier left down).
func TestKeyCombo(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	ctx := testContext(t)
	active := func() string { return strings.TrimSpace(mustGuest(t, agent, "cat /sys/class/tty/tty0/active")) }
	// The kernel switches only to a console that exists: opening tty2
	// allocates it, as a getty on it would.
	mustGuest(t, agent, "printf 'tty2\\n' >/dev/tty2")
	if err := s.Key(ctx, "ctrl-alt-f2"); err != nil {
		t.Fatal(seen(err))
	}
	if err := eventually(ctx, func() bool { return active() == "tty2" }); err != nil {
		t.Fatalf("ctrl-alt-f2 left the guest on %s", active())
	}
	if err := s.Key(ctx, "ctrl-alt-f1"); err != nil {
		t.Fatal(seen(err))
	}
	if err := eventually(ctx, func() bool { return active() == "tty1" }); err != nil {
		t.Fatalf("ctrl-alt-f1 left the guest on %s", active())
	}
	if got, _ := typeIntoCat(t, s, agent, "/tmp/combo", "plain text\n"); got != "plain text\n" {
		t.Fatalf("after the combination the guest got %q: a modifier stayed down?", got)
	}
	var presses, releases int
	for _, c := range srv.Calls() {
		if strings.Contains(c, "send_key?key=AltLeft") {
			if strings.Contains(c, "state=true") {
				presses++
			} else if strings.Contains(c, "state=false") {
				releases++
			}
		}
	}
	if presses != 2 || releases != 2 {
		t.Errorf("AltLeft pressed %d and released %d times, want 2 and 2 with explicit states", presses, releases)
	}
	err := s.Key(ctx, "ctrl-hyper")
	if text := seen(err); err == nil || !strings.Contains(text, "hyper") {
		t.Errorf("an unknown key answered %v", text)
	}
}

// inputEvent is Linux's struct input_event on x86-64.
type inputEvent struct {
	at        time.Duration
	typ, code uint16
	value     int32
}

const (
	evKey, evRel, evAbs = 1, 2, 3
	absX, absY          = 0, 1
	relWheel            = 8
	btnLeft             = 0x110
)

func parseEvents(data []byte) []inputEvent {
	var out []inputEvent
	for len(data) >= 24 {
		sec := int64(binary.LittleEndian.Uint64(data[0:8]))
		usec := int64(binary.LittleEndian.Uint64(data[8:16]))
		out = append(out, inputEvent{
			at:  time.Duration(sec)*time.Second + time.Duration(usec)*time.Microsecond,
			typ: binary.LittleEndian.Uint16(data[16:18]), code: binary.LittleEndian.Uint16(data[18:20]),
			value: int32(binary.LittleEndian.Uint32(data[20:24])),
		})
		data = data[24:]
	}
	return out
}

// qemuAbs is where a pixel lands on QEMU's absolute axis: kvmd's web UI
// mapping, then the fake's onto 0..32767 (kvmd's remap).
func qemuAbs(p, size int) int32 {
	k := toKVMD(p, size)
	return int32(math.Round(float64(k+32768) * 32767 / 65535))
}

// tablet records what the guest's tablet reports (its evdev events, read
// by dd in the guest) from now on.
type tablet struct {
	t     *testing.T
	ctx   context.Context
	agent *qga.Client
	evs   []inputEvent // what saw read last
}

func recordTablet(t *testing.T, ctx context.Context, agent *qga.Client) *tablet {
	t.Helper()
	dev := strings.TrimSpace(mustGuest(t, agent,
		`for d in /sys/class/input/event*; do grep -q Tablet $d/device/name && basename $d; done`))
	if dev == "" {
		t.Fatal("the guest has no tablet event device")
	}
	mustGuest(t, agent, "rm -f /tmp/ev; dd if=/dev/input/"+dev+" of=/tmp/ev bs=24 2>/dev/null & echo $! >/tmp/ev.pid")
	t.Cleanup(func() { guest(context.WithoutCancel(ctx), agent, "kill $(cat /tmp/ev.pid)") })
	if err := eventually(ctx, func() bool { // dd has the device open
		out, _ := guest(ctx, agent, "ls -l /proc/$(cat /tmp/ev.pid)/fd")
		return strings.Contains(out, "/dev/input/"+dev)
	}); err != nil {
		t.Fatal("dd did not open the tablet")
	}
	return &tablet{t: t, ctx: ctx, agent: agent}
}

// saw waits until the guest has reported n events from the from-th on
// that match want, and answers those events. A tablet reports its latest
// position at each poll, so a test waits for one action to show before
// the next.
func (tb *tablet) saw(what string, from int, want func(inputEvent) bool, n int) []inputEvent {
	tb.t.Helper()
	if err := eventually(tb.ctx, func() bool {
		data, _, err := tb.agent.ReadFile(tb.ctx, "/tmp/ev", 0, 1<<20)
		if err != nil {
			return false
		}
		tb.evs = parseEvents(data)
		count := 0
		for _, e := range tb.evs[min(from, len(tb.evs)):] {
			if want(e) {
				count++
			}
		}
		return count >= n
	}); err != nil {
		tb.t.Fatalf("the guest never reported %s; events: %v", what, tb.evs)
	}
	return tb.evs[from:]
}

// The mouse lands where asked: the guest's tablet reports the absolute
// position of the pixel, a 300 ms left click and wheel notches down.
func TestMouse(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	ctx := testContext(t)
	tab := recordTablet(t, ctx, agent)
	w, h, err := s.size(ctx)
	if err != nil {
		t.Fatal(seen(err))
	}
	if err := s.Move(ctx, 100, 50); err != nil {
		t.Fatal(seen(err))
	}
	tab.saw("the move", 0, func(e inputEvent) bool { return e.typ == evAbs && e.code == absY && e.value == qemuAbs(50, h) }, 1)
	if err := s.Click(ctx, w-1, h-1, backends.Left, 1); err != nil {
		t.Fatal(seen(err))
	}
	tab.saw("the click", 0, func(e inputEvent) bool { return e.typ == evKey && e.code == btnLeft && e.value == 0 }, 1)
	if err := s.Wheel(ctx, 360, 200, 2); err != nil {
		t.Fatal(seen(err))
	}
	evs := tab.saw("two wheel notches", 0, func(e inputEvent) bool { return e.typ == evRel && e.code == relWheel }, 2)

	// Each move steps a pixel first (TestMoveSetsBothAxes); the points
	// moved to are the positions left once those steps are set aside.
	steps := map[[2]int32]bool{
		{qemuAbs(101, w), qemuAbs(51, h)}: true, {qemuAbs(w-2, w), qemuAbs(h-2, h)}: true, {qemuAbs(361, w), qemuAbs(201, h)}: true,
	}
	var xs, ys []int32
	var x, y int32 = -1, -1
	var down, up time.Duration
	for _, e := range evs {
		switch {
		case e.typ == evAbs && e.code == absX:
			x = e.value
		case e.typ == evAbs && e.code == absY:
			y = e.value
		case e.typ == 0 && e.code == 0 && x >= 0: // SYN_REPORT: one position
			if !steps[[2]int32{x, y}] && (len(xs) == 0 || xs[len(xs)-1] != x || ys[len(ys)-1] != y) {
				xs, ys = append(xs, x), append(ys, y)
			}
		case e.typ == evKey && e.code == btnLeft && e.value == 1:
			down = e.at
		case e.typ == evKey && e.code == btnLeft && e.value == 0:
			up = e.at
		case e.typ == evRel && e.code == relWheel && e.value != -1:
			t.Errorf("wheel down reported %d, want -1 per notch", e.value)
		}
	}
	want := fmt.Sprint([]int32{qemuAbs(100, w), qemuAbs(w-1, w), qemuAbs(360, w)}, []int32{qemuAbs(50, h), qemuAbs(h-1, h), qemuAbs(200, h)})
	if got := fmt.Sprint(xs, ys); got != want {
		t.Errorf("the tablet reported positions x,y %s, want %s", got, want)
	}
	if len(xs) > 1 && (xs[1] != 32767 || ys[1] != 32767) {
		t.Errorf("the bottom-right pixel landed at %d,%d, want the end of the axis", xs[1], ys[1])
	}
	if hold := up - down; down == 0 || hold < 250*time.Millisecond {
		t.Errorf("the left button was held %v, want about 300 ms", hold)
	}
	if err := s.Move(ctx, w, 0); err == nil || !strings.Contains(seen(err), "outside") {
		t.Errorf("a point off the screen answered %v", err)
	}
}

// Every move sets both axes. The guest's kernel drops an absolute axis
// whose value did not change, so a move to the height of the last one
// would report x alone, and a pointer the guest moved meanwhile (xdotool,
// a program warping it) would keep the guest's y.
func TestMoveSetsBothAxes(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	ctx := testContext(t)
	tab := recordTablet(t, ctx, agent)
	w, h, err := s.size(ctx)
	if err != nil {
		t.Fatal(seen(err))
	}
	y := qemuAbs(50, h)
	if err := s.Move(ctx, 100, 50); err != nil {
		t.Fatal(seen(err))
	}
	from := len(tab.saw("the first move", 0, func(e inputEvent) bool { return e.typ == evAbs && e.code == absY && e.value == y }, 1))
	for _, c := range []struct {
		what string
		act  func() error
		done func(inputEvent) bool // the event that ends the action
	}{
		{"a move along the row", func() error { return s.Move(ctx, 300, 50) },
			func(e inputEvent) bool { return e.typ == evAbs && e.code == absX && e.value == qemuAbs(300, w) }},
		{"a click where the pointer is", func() error { return s.Click(ctx, 300, 50, backends.Left, 1) },
			func(e inputEvent) bool { return e.typ == evKey && e.code == btnLeft && e.value == 0 }},
		{"a wheel notch along the row", func() error { return s.Wheel(ctx, 20, 50, 1) },
			func(e inputEvent) bool { return e.typ == evRel && e.code == relWheel }},
	} {
		if err := c.act(); err != nil {
			t.Fatal(seen(err))
		}
		evs := tab.saw(c.what, from, c.done, 1)
		var ys []int32
		for _, e := range evs {
			if e.typ == evAbs && e.code == absY {
				ys = append(ys, e.value)
			}
		}
		if len(ys) == 0 || ys[len(ys)-1] != y {
			t.Errorf("%s: the guest saw y %v, want it set again, ending at %d", c.what, ys, y)
		}
		from += len(evs)
	}
}

// A kvmd older than 4.93 ignores hid/print's delay (it would send the
// text at full speed): the bench types key by key there, paced, and
// nothing is lost either.
func TestTypeOnOldKVMD(t *testing.T) {
	vm, agent := machine(t)
	opts := fakeOpts(vm)
	opts.Version = "4.80"
	srv := startFake(t, opts)
	s := screenOf(t, newBench(t, srv, nil))
	text := "Mixed CASE & symbols: {x} <y> ~z~ 42!\n"
	if got, _ := typeIntoCat(t, s, agent, "/tmp/old", text); got != text {
		t.Fatalf("the guest got %q, want %q", got, text)
	}
	keys := 0
	for _, c := range srv.Calls() {
		if strings.HasPrefix(c, "POST /api/hid/print") {
			t.Fatalf("the bench used hid/print on kvmd 4.80: %s", c)
		}
		if strings.HasPrefix(c, "POST /api/hid/events/send_key") {
			keys++
		}
	}
	if keys < 2*len(text) {
		t.Errorf("%d key events for %d characters", keys, len(text))
	}
}
