package rfb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/internal/deadline"
)

var (
	_ backends.Screen      = (*Client)(nil)
	_ backends.ChangeClock = (*Client)(nil)
)

// Dialer opens a new connection to the VNC server. It is called again for
// every reconnect.
type Dialer func(ctx context.Context) (net.Conn, error)

// Config says how to reach the server and how to behave.
type Config struct {
	// Dial is required; it is called again to reconnect.
	Dial Dialer
	// Password for VNC authentication; only its first 8 characters count.
	// Empty means the server must offer security type None.
	Password string
	// PasswordFunc, if set, answers the password for the connection Dial has
	// just opened and overrides Password (a Proxmox vncproxy ticket is new
	// for every connection).
	PasswordFunc func() string
	// Encodings are the preferred pixel encodings, best first: EncodingRaw
	// (cheapest on a local socket) and EncodingZRLE (for websockets and WANs).
	// Default [Raw, ZRLE]. DesktopSize, ExtendedDesktopSize and QEMU's
	// ExtendedKeyEvent are always appended.
	Encodings []int32
	// KeyDelay is the pause after each key event; 0 means DefaultKeyDelay and
	// a negative value means no pause.
	KeyDelay time.Duration
	// Logger gets connection events; nil discards them.
	Logger *slog.Logger
	// Dump, if set, receives every byte the server sends, from its version
	// string on, for each connection (POLIGON_MCP_DUMP: a test fixture).
	// Shared by several clients it must be safe for concurrent writes. A
	// failed write is ignored: the console never fails for its recording.
	Dump io.Writer
}

// DefaultKeyDelay paces key events at QEMU's own rate: its VNC server queues
// key events and hands them to the guest 10 ms apart (-vnc key-delay-ms), so a
// faster client only fills QEMU's queue.
const DefaultKeyDelay = 10 * time.Millisecond

// Timeouts of the connection itself.
const (
	handshakeTimeout = 30 * time.Second
	writeTimeout     = 10 * time.Second
	maxBackoff       = 5 * time.Second
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("rfb: the VNC client is closed")

// Client is a live VNC console. Frame, Size and Updated may be called from
// any goroutine at any time; input calls run one at a time, in call order
// of acquisition.
type Client struct {
	cfg      Config
	log      *slog.Logger
	delay    time.Duration
	ctx      context.Context // ends with Close
	cancel   context.CancelFunc
	done     chan struct{} // closed when the connection goroutine ends
	inputSem chan struct{} // one slot: serializes input calls
	freshSem chan struct{} // one slot: serializes FreshFrame's requests

	mu        sync.Mutex
	frame     *image.RGBA // the published frame; nil before the first one
	changedAt time.Time
	updated   chan struct{} // closed at the next pixel change
	live      *link         // the live connection, nil while (re)connecting
	liveCh    chan struct{} // closed when live changes
	lastErr   error         // why the last connection or dial failed
	goneErr   error         // why the client stopped by itself (its VM is gone)
}

// link is one connection, handshake done.
type link struct {
	conn     net.Conn
	wmu      sync.Mutex
	extKeys  atomic.Bool // QEMU acknowledged ExtendedKeyEvent
	broken   atomic.Bool
	dead     chan struct{} // closed by fail
	deadOnce sync.Once
	answers  answers // what FreshFrame waits for
}

// send writes one whole message; a failed write breaks the link, and the
// reader's error then starts the reconnect.
func (s *link) send(msg []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.broken.Load() {
		return errors.New("the VNC connection is broken")
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.conn.Write(msg); err != nil {
		s.fail()
		return fmt.Errorf("writing to the VNC server: %w", err)
	}
	return nil
}

func (s *link) fail() {
	s.broken.Store(true)
	s.deadOnce.Do(func() { close(s.dead) })
	_ = s.conn.Close()
}

// Connect dials, runs the handshake, starts the reader and waits for the
// first full frame.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Dial == nil {
		return nil, errors.New("rfb: Config.Dial is required")
	}
	if len(cfg.Encodings) == 0 {
		cfg.Encodings = []int32{EncodingRaw, EncodingZRLE}
	}
	for _, e := range cfg.Encodings {
		if e != EncodingRaw && e != EncodingZRLE {
			return nil, fmt.Errorf("rfb: encoding %d is not supported (use EncodingRaw %d or EncodingZRLE %d)", e, EncodingRaw, EncodingZRLE)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	delay := cfg.KeyDelay
	if delay == 0 {
		delay = DefaultKeyDelay
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg: cfg, log: log, delay: max(delay, 0), ctx: cctx, cancel: cancel,
		done: make(chan struct{}), inputSem: make(chan struct{}, 1), freshSem: make(chan struct{}, 1),
		updated: make(chan struct{}), liveCh: make(chan struct{}),
	}
	s, dec, err := c.dial(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("rfb: connecting to the VNC server: %w", err)
	}
	go c.run(s, dec)
	for {
		c.mu.Lock()
		ready, ch := c.live != nil, c.liveCh
		c.mu.Unlock()
		if ready {
			return c, nil
		}
		select {
		case <-ch:
		case <-c.done: // the VM stopped before the first frame
			return nil, fmt.Errorf("rfb: waiting for the first frame: %w", c.closedErr())
		case <-ctx.Done():
			lastErr := c.lastError()
			c.Close()
			if lastErr != nil {
				return nil, fmt.Errorf("rfb: waiting for the first frame (%v): %w", lastErr, ctx.Err())
			}
			return nil, fmt.Errorf("rfb: waiting for the first frame: %w", ctx.Err())
		}
	}
}

// dial opens and sets up one link: handshake, pixel format, encodings.
func (c *Client) dial(ctx context.Context) (*link, *decoder, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	conn, err := c.cfg.Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("dialling: %w", err)
	}
	password := c.cfg.Password
	if c.cfg.PasswordFunc != nil {
		password = c.cfg.PasswordFunc()
	}
	unbind := deadline.Bind(ctx, conn, deadline.Both)
	s, dec, err := c.setup(conn, password)
	unbind()
	if err != nil {
		_ = conn.Close()
		if ctx.Err() != nil && !errors.Is(err, ErrAuth) {
			return nil, nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, nil, err
	}
	return s, dec, nil
}

func (c *Client) setup(conn net.Conn, password string) (*link, *decoder, error) {
	var in io.Reader = conn
	if c.cfg.Dump != nil {
		in = dumpReader{conn, c.cfg.Dump}
	}
	r := bufio.NewReaderSize(in, 64<<10)
	si, err := handshake(conn, r, password)
	if err != nil {
		return nil, nil, err
	}
	dec, err := newDecoder(r, si.width, si.height)
	if err != nil {
		return nil, nil, err
	}
	s := &link{conn: conn, dead: make(chan struct{}), answers: newAnswers()}
	encodings := append(append([]int32(nil), c.cfg.Encodings...),
		EncodingDesktopSize, EncodingExtendedDesktopSize, EncodingQEMUExtendedKey)
	setup := append(setPixelFormatMsg(), setEncodingsMsg(encodings)...)
	if _, err := conn.Write(setup); err != nil {
		return nil, nil, fmt.Errorf("sending the pixel format and encodings: %w", err)
	}
	c.log.Debug("rfb: connected", "protocol", si.version, "desktop", si.name, "width", si.width, "height", si.height)
	return s, dec, nil
}

// run serves links until Close, redialling with backoff when one drops.
func (c *Client) run(s *link, dec *decoder) {
	defer close(c.done)
	for {
		err := c.serve(s, dec)
		s.fail()
		c.mu.Lock()
		if c.live == s {
			c.live = nil
		}
		c.lastErr = err
		c.broadcastLink()
		c.mu.Unlock()
		if c.ctx.Err() != nil {
			return
		}
		// Not a warning yet: a VM that stopped drops its console too, and
		// the redial tells which it was.
		c.log.Debug("rfb: VNC connection lost; reconnecting", "err", err)
		if s, dec = c.redial(); s == nil {
			return
		}
	}
}

// gone says whether a dial failed because the VM is not running or not
// there any more: redialling cannot help until someone starts it, and
// whoever does opens a new console.
func gone(err error) bool {
	return errors.Is(err, backends.ErrNotRunning) || errors.Is(err, backends.ErrNotFound)
}

// redial dials until it succeeds, the client is closed, or the VM is gone
// (then the client closes itself, quietly: a stopped VM is no failure).
// Failures are warned about at attempts 1, 2, 4, 8, ..., not every few
// seconds for as long as the server is down.
func (c *Client) redial() (*link, *decoder) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		s, dec, err := c.dial(c.ctx)
		if err == nil {
			c.log.Info("rfb: VNC connection re-established", "attempts", attempt)
			return s, dec
		}
		c.mu.Lock()
		c.lastErr = err
		if gone(err) && c.ctx.Err() == nil {
			c.goneErr = err
		}
		c.mu.Unlock()
		if gone(err) {
			c.log.Info("rfb: the console's VM is not running; console closed", "err", err)
			c.cancel()
			return nil, nil
		}
		if attempt&(attempt-1) == 0 {
			c.log.Warn("rfb: reconnecting failed", "attempt", attempt, "err", err, "retry_in", backoff)
		} else {
			c.log.Debug("rfb: reconnecting failed", "attempt", attempt, "err", err, "retry_in", backoff)
		}
		select {
		case <-c.ctx.Done():
			return nil, nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// broadcastLink wakes everyone waiting for a link change. c.mu is held.
func (c *Client) broadcastLink() {
	close(c.liveCh)
	c.liveCh = make(chan struct{})
}

// maxUpdatesBeforePublish bounds how many pixel updates after a (re)size the
// client waits for full coverage before it shows what it has.
const maxUpdatesBeforePublish = 4

// serve reads one link's messages until it fails. It asks for the next
// incremental update after every update message, so the frame stays live
// (QEMU holds an incremental request until something changes).
func (c *Client) serve(s *link, dec *decoder) error {
	stop := context.AfterFunc(c.ctx, s.fail)
	defer stop()
	// The reader's only non-incremental request (FreshFrame sends others):
	// QEMU answers every non-incremental request with an ExtendedDesktopSize
	// rect, so answering those with non-incremental requests would loop.
	s.answers.asked()
	if err := s.send(updateRequestMsg(false, 0, 0, dec.width, dec.height)); err != nil {
		return err
	}
	published := false // since the last (re)size
	pixelUpdates := 0
	for {
		t, u, err := dec.readMessage()
		if err != nil {
			if c.ctx.Err() != nil {
				return ErrClosed
			}
			return fmt.Errorf("reading from the VNC server: %w", err)
		}
		if t != msgFramebufferUpdate {
			continue
		}
		if dec.extKeyAck {
			s.extKeys.Store(true)
		}
		if u.resized {
			published, pixelUpdates = false, 0
			c.log.Debug("rfb: screen resized", "width", dec.width, "height", dec.height)
		}
		if u.pixelRects > 0 {
			pixelUpdates++
		}
		shown := true
		switch {
		case published && !u.dirty.Empty():
			c.publish(s, dec, u.dirty)
		case !published && (dec.fullyCovered() || pixelUpdates >= maxUpdatesBeforePublish):
			c.publish(s, dec, image.Rect(0, 0, dec.width, dec.height))
			published = true
		default:
			shown = false
		}
		s.answers.note(u.echo, shown)
		if u.pixelRects == 0 && !u.resized {
			// Guard against servers that answer at once with empty updates.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-c.ctx.Done():
				return ErrClosed
			}
		}
		if err := s.send(updateRequestMsg(true, 0, 0, dec.width, dec.height)); err != nil {
			return err
		}
	}
}

// publish copies the region r of the decoder's frame into the published
// frame, noting the time if any pixel actually differs. It also makes s the
// live link, since it has now shown a frame.
func (c *Client) publish(s *link, dec *decoder, r image.Rectangle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	f := c.frame
	if f == nil || f.Rect.Dx() != dec.width || f.Rect.Dy() != dec.height {
		f = image.NewRGBA(image.Rect(0, 0, dec.width, dec.height))
		copy(f.Pix, dec.pix)
		c.frame = f
		changed = true
	} else {
		stride := 4 * dec.width
		for y := r.Min.Y; y < r.Max.Y; y++ {
			src := dec.pix[y*stride+4*r.Min.X : y*stride+4*r.Max.X]
			dst := f.Pix[y*stride+4*r.Min.X : y*stride+4*r.Max.X]
			if !bytes.Equal(src, dst) {
				copy(dst, src)
				changed = true
			}
		}
	}
	if changed {
		c.changedAt = time.Now()
		close(c.updated)
		c.updated = make(chan struct{})
	}
	if c.live != s && !s.broken.Load() {
		c.live = s
		c.lastErr = nil
		c.broadcastLink()
	}
}

// Changed answers when the frame's pixels last changed, without a copy of
// them (backends.ChangeClock): a watcher polls it and copies a frame only
// when it moved.
func (c *Client) Changed() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changedAt
}

// Frame answers a copy of the current frame and when its pixels last
// changed. It does not talk to the server: while the client reconnects it
// answers the last frame.
func (c *Client) Frame(ctx context.Context) (*image.RGBA, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	if c.ctx.Err() != nil {
		return nil, time.Time{}, c.closedErr()
	}
	for {
		// Allocate outside the lock (that is the slow part), copy inside.
		w, h := c.Size()
		if w == 0 {
			return nil, time.Time{}, errors.New("rfb: no frame yet")
		}
		f := image.NewRGBA(image.Rect(0, 0, w, h))
		c.mu.Lock()
		if c.frame.Rect == f.Rect {
			copy(f.Pix, c.frame.Pix)
			at := c.changedAt
			c.mu.Unlock()
			return f, at, nil
		}
		c.mu.Unlock() // resized meanwhile: try again
	}
}

// Size answers the size of the frame Frame answers.
func (c *Client) Size() (w, h int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frame == nil {
		return 0, 0
	}
	return c.frame.Rect.Dx(), c.frame.Rect.Dy()
}

// Updated answers a channel that is closed the next time the frame's pixels
// change (an update that repaints identical pixels does not count). Take a
// new channel after it fires. Typical use:
//
//	ch := c.Updated()
//	frame, _, _ := c.Frame(ctx)
//	... not what we wait for ...
//	select { case <-ch: case <-ctx.Done(): }
func (c *Client) Updated() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.updated
}

// Done is closed once the client has stopped for good: Close, or its VM
// stopped or went away (a dial said backends.ErrNotRunning or
// ErrNotFound). A console cache drops a client that is done.
func (c *Client) Done() <-chan struct{} { return c.done }

// closedErr is ErrClosed, with why the client closed itself if it did.
func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goneErr != nil {
		return fmt.Errorf("%w: %w", ErrClosed, c.goneErr)
	}
	return ErrClosed
}

// Close ends the connection and stops reconnecting. Input calls in flight
// return ErrClosed.
func (c *Client) Close() error {
	c.cancel()
	c.mu.Lock()
	s := c.live
	c.mu.Unlock()
	if s != nil {
		s.fail()
	}
	<-c.done
	return nil
}

// lastError is why the last connection or dial failed, read when a wait
// gives up (a redial may have failed since the wait began).
func (c *Client) lastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// liveLink waits for a live link, within ctx.
func (c *Client) liveLink(ctx context.Context) (*link, error) {
	for {
		if c.ctx.Err() != nil {
			return nil, c.closedErr()
		}
		c.mu.Lock()
		s, ch := c.live, c.liveCh
		c.mu.Unlock()
		if s != nil && !s.broken.Load() {
			return s, nil
		}
		select {
		case <-ch:
		case <-c.ctx.Done():
			return nil, c.closedErr()
		case <-ctx.Done():
			if lastErr := c.lastError(); lastErr != nil {
				return nil, fmt.Errorf("rfb: waiting for the VNC connection to come back (%v): %w", lastErr, ctx.Err())
			}
			return nil, fmt.Errorf("rfb: waiting for the VNC connection to come back: %w", ctx.Err())
		}
	}
}

// dumpReader copies what it reads to w, ignoring w's errors.
type dumpReader struct {
	r io.Reader
	w io.Writer
}

func (d dumpReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.w.Write(p[:n])
	}
	return n, err
}
