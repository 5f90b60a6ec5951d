package rfb

import (
	"context"
	"fmt"
	"image"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Fresh frames. The live frame (Frame) is the last update the server sent,
// and QEMU's VNC server sends updates on its refresh timer, which backs off
// to 3 s while the screen is idle: a change the guest has just made can
// show that much later. FreshFrame asks the server instead, relying on what
// QEMU (7.2, ui/vnc.c and vnc-jobs.c) does:
//
//   - A non-incremental FramebufferUpdateRequest makes the next refresh send
//     an update even if nothing changed, and is answered at once with an
//     ExtendedDesktopSize rect of the current size (the echo).
//   - An update carries everything that changed for this client since the
//     last one; the refresh that makes it first renders the guest's display.
//     After any update made after the request, the client's frame is the
//     screen as it was then.
//   - Updates are encoded one at a time on a worker thread: one made before
//     the request may still arrive after the echo, never two.
//   - A client message of a type above 3 (a key event) brings the refresh
//     timer down to 30 ms; an update request does not. A key-up of a key
//     that is not down (scancode 0) never reaches the guest.
//
// So a request (for a 16x1 corner: the update it forces is cheap) goes with
// such a key-up, and is answered by the first update after its echo, which
// may have been made before the request. A second request settles it: the
// first update after its echo was made after the first request's update
// arrived, so after the first request.

var _ backends.FreshScreen = (*Client)(nil)

// freshTimeout bounds FreshFrame: a server that does not echo (not QEMU)
// must not hold a screenshot for long.
const freshTimeout = 5 * time.Second

var errNoAnswer = fmt.Errorf("the VNC server did not answer a request for the screen within %s", freshTimeout)

// answers counts, for one link, the server's echoes and the updates shown,
// as the reader sees them.
type answers struct {
	mu      sync.Mutex
	sent    int // non-incremental requests, the one at connect included
	echoes  int
	shown   int           // updates published
	atEcho  int           // shown when the last echo came
	changed chan struct{} // closed at the next echo or update shown
}

func newAnswers() answers { return answers{changed: make(chan struct{})} }

// asked counts a non-incremental request about to be sent and answers its
// number.
func (a *answers) asked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent++
	return a.sent
}

// note records one update message: an echo (first, should a server put the
// echo and pixels in one message), then pixels shown.
func (a *answers) note(echo, shown bool) {
	if !echo && !shown {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if echo {
		a.echoes++
		a.atEcho = a.shown
	}
	if shown {
		a.shown++
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// answered says whether request n has been echoed and an update shown
// after the echo, and answers the channel to wait on if not.
func (a *answers) answered(n int) (bool, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.echoes >= n && a.shown > a.atEcho, a.changed
}

// FreshFrame asks the server for the screen as it is now and answers it
// once the answer has arrived: a frame no older than the call (see above).
// A connection that drops meanwhile is asked again once it is back.
func (c *Client) FreshFrame(ctx context.Context) (*image.RGBA, time.Time, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, freshTimeout, errNoAnswer)
	defer cancel()
	select {
	case c.freshSem <- struct{}{}:
	case <-ctx.Done():
		return nil, time.Time{}, c.freshErr(ctx, "waiting for another request for the screen")
	}
	defer func() { <-c.freshSem }()
	for {
		s, err := c.liveLink(ctx)
		if err != nil {
			return nil, time.Time{}, err
		}
		if err = c.ask(ctx, s); err == nil {
			err = c.ask(ctx, s)
		}
		if err == nil {
			return c.Frame(ctx)
		}
		if ctx.Err() != nil || c.ctx.Err() != nil {
			return nil, time.Time{}, c.freshErr(ctx, "waiting for the server's answer")
		}
		// The link broke: ask the next one.
	}
}

// ask sends one request and waits for its answer on link s.
func (c *Client) ask(ctx context.Context, s *link) error {
	w, _ := c.Size()
	msg := updateRequestMsg(false, 0, 0, min(16, max(w, 1)), 1)
	if s.extKeys.Load() {
		msg = append(msg, extKeyEventMsg(Key{}, false)...)
	}
	n := s.answers.asked()
	if err := s.send(msg); err != nil {
		return err
	}
	for {
		ok, ch := s.answers.answered(n)
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-s.dead:
			return fmt.Errorf("the VNC connection broke")
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ctx.Done():
			return c.closedErr()
		}
	}
}

func (c *Client) freshErr(ctx context.Context, doing string) error {
	if c.ctx.Err() != nil {
		return c.closedErr()
	}
	return fmt.Errorf("rfb: %s: %w", doing, context.Cause(ctx))
}
