package rfb

import (
	"context"
	"image"
	"testing"
	"time"
)

func shadeOf(f *image.RGBA) byte { return f.Pix[0] }

// The screen changed while the server sent nothing (QEMU's refresh timer
// backed off), and an update made before the request is still on its way
// when the server echoes it: the live frame is the old screen, the stale
// update is older than the call, and FreshFrame answers neither.
func TestFreshFrameAnswersTheScreenAsItIs(t *testing.T) {
	srv := newFakeServer(t)
	srv.screen = &fakeScreen{}
	c := connect(t, Config{Dial: srv.dial})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitExtKeys(t, c)

	for i, stale := range []byte{100, 0, 150} {
		now := byte(200 + i)
		srv.screen.set(now, &stale)
		if live, _, _ := c.Frame(ctx); shadeOf(live) == now {
			t.Fatalf("round %d: the live frame shows the change before the server sent it", i)
		}
		f, _, err := c.FreshFrame(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := shadeOf(f); got != now {
			t.Fatalf("round %d: FreshFrame answered shade %d, the screen is %d (%d is an update made before the call)", i, got, now, stale)
		}
	}

	// Each request goes with a key-up of scancode 0 (it brings QEMU's
	// refresh timer down; QEMU gives the guest no key-up of a key not down).
	for i, m := range srv.recorded() {
		if want := extKeyEventMsg(Key{}, false); string(m) != string(want) {
			t.Fatalf("input message %d is % x, want the key-up % x", i, m, want)
		}
	}
	if n := len(srv.recorded()); n != 6 {
		t.Fatalf("%d key-ups for 3 fresh frames, want 6 (two requests each)", n)
	}
}

// A server that never echoes (not QEMU) gets a bounded wait and an error
// that says so, not a hang.
func TestFreshFrameWithoutEcho(t *testing.T) {
	srv := newFakeServer(t) // answers nothing after the first frame
	c := connect(t, Config{Dial: srv.dial})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := c.FreshFrame(ctx)
	if err == nil {
		t.Fatal("FreshFrame answered a server that never echoes")
	}
	if ctx.Err() == nil {
		t.Fatalf("FreshFrame gave up before its context: %v", err)
	}
}

func waitExtKeys(t *testing.T, c *Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		s := c.live
		c.mu.Unlock()
		if s != nil && s.extKeys.Load() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the ExtendedKeyEvent ack did not arrive")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// QEMU's own VNC server echoes the requests and answers them while the
// screen is idle (a paused machine: the refresh timer has backed off to
// its longest): the frame is QEMU's picture of the screen.
func TestQEMUFreshFrame(t *testing.T) {
	vm := startQEMU(t, qemuOptions{paused: true})
	c := connect(t, Config{Dial: vm.dialer()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		f, _, err := c.FreshFrame(ctx)
		if err != nil {
			t.Fatalf("FreshFrame %d: %v", i, err)
		}
		if dump := vm.screendump(t); !sameFrame(f, dump) {
			t.Fatalf("FreshFrame %d (%v) is not QEMU's screendump (%v)", i, f.Rect, dump.Rect)
		}
	}
}
