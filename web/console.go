package web

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/poligon/poligon/hostapi"
)

// The live console follows the frames poligon already has: the VM's
// console connection (opened once, shared with every call) keeps its
// framebuffer current, and a feed per VM polls its change clock (no copy
// of the pixels), takes a frame only when it moved, and sends the browsers
// watching the rectangle that changed as a PNG. However many browsers
// watch, a VM has one feed: one look and one encoding per change.
//
// A message is binary: a 21-byte header (kind 1 PNG or 2 JPEG; x, y, w, h
// of the rectangle and the frame's width and height as big-endian uint16;
// when the change was seen, in Unix milliseconds, as uint64), then the
// image. A text message is JSON: {"status": "..."} when the console cannot
// be seen, {"status": ""} when it can again.

const (
	kindPNG  = 1
	kindJPEG = 2
	// headerLen is a frame message's header.
	headerLen = 21
	// wholeAbove: a change larger than this share of the frame goes whole
	// (the fast PNG encoder, shared with ui_screenshot's cache).
	wholeAbove = 0.5
	// darkRetry is how often a console that could not be seen is tried
	// again.
	darkRetry = time.Second
	// sessionCheck is how often a console's socket checks its session is
	// still logged in.
	sessionCheck = 10 * time.Second
)

// message is one message to a browser.
type message struct {
	text bool
	data []byte
}

// subscriber is one browser watching.
type subscriber struct {
	ch    chan message
	stale bool // a message was dropped: it needs the whole frame next
}

// feed is one VM's console, followed for its watchers.
type feed struct {
	key     string
	watched *hostapi.Watched
	cancel  context.CancelFunc

	mu     sync.Mutex
	subs   map[*subscriber]bool
	last   hostapi.Frame // the frame the watchers have
	status string        // why the console cannot be seen, "" when it can
}

// subscribe adds a watcher of watched's VM, starting its feed if it has
// none. The caller must call unsubscribe.
func (s *Server) subscribe(bench string, watched *hostapi.Watched) (*feed, *subscriber) {
	key := fmt.Sprintf("%s/%d/%s", bench, watched.VM().VMID, watched.Owner())
	sub := &subscriber{ch: make(chan message, 16)}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.feeds[key]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		f = &feed{key: key, watched: watched, cancel: cancel, subs: map[*subscriber]bool{}}
		s.feeds[key] = f
		go f.run(ctx, s.o.PollEvery, s.o.FrameGap)
	}
	f.mu.Lock()
	f.subs[sub] = true
	if f.last.Image != nil {
		if msg, err := encodeChange(f.last, nil); err == nil {
			sub.ch <- msg
		}
	}
	if f.status != "" {
		sub.ch <- statusMessage(f.status)
	}
	f.mu.Unlock()
	return f, sub
}

func (s *Server) unsubscribe(f *feed, sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.mu.Lock()
	delete(f.subs, sub)
	empty := len(f.subs) == 0
	f.mu.Unlock()
	if empty {
		f.cancel()
		delete(s.feeds, f.key)
	}
}

// Watchers answers how many browsers watch consoles now.
func (s *Server) Watchers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.feeds {
		f.mu.Lock()
		n += len(f.subs)
		f.mu.Unlock()
	}
	return n
}

// run polls the console until ctx ends. A change is sent at once when the
// last was sent at least gap ago; a screen that keeps changing (typing,
// scrolling) is sent every gap: the browsers' decoding and drawing would
// otherwise take the CPU the guest needs.
func (f *feed) run(ctx context.Context, every, gap time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var seen int64 = -1 // the change clock's reading whose frame was sent
	var retryAt, sent time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if now := time.Now(); now.Before(retryAt) || now.Sub(sent) < gap {
			continue
		}
		at, clock := f.watched.Changes(ctx)
		if clock && at == seen {
			continue
		}
		fr, err := f.watched.Frame(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.setStatus(err.Error() + hintSuffix(err))
			retryAt = time.Now().Add(darkRetry)
			seen = -1
			continue
		}
		f.setStatus("")
		if clock {
			seen = at
			fr.At = time.Unix(0, at)
		}
		f.mu.Lock()
		prev := f.last
		f.mu.Unlock()
		msg, err := encodeChange(fr, prev.Image)
		if err != nil || msg.data == nil { // nothing changed (a console without a clock)
			continue
		}
		sent = time.Now()
		f.mu.Lock()
		f.last = fr
		var whole *message
		for sub := range f.subs {
			if sub.stale {
				if whole == nil {
					m, err := encodeChange(fr, nil)
					if err != nil {
						break
					}
					whole = &m
				}
				if trySend(sub, *whole) {
					sub.stale = false
				}
				continue
			}
			if !trySend(sub, msg) {
				sub.stale = true
			}
		}
		f.mu.Unlock()
	}
}

func hintSuffix(err error) string {
	if h := hostapi.HintOf(err); h != "" {
		return " (" + h + ")"
	}
	return ""
}

// setStatus tells the watchers whether the console can be seen, once per
// change.
func (f *feed) setStatus(status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if status == f.status {
		return
	}
	f.status = status
	for sub := range f.subs {
		trySend(sub, statusMessage(status))
	}
}

func statusMessage(status string) message {
	b, _ := json.Marshal(map[string]string{"status": status})
	return message{text: true, data: b}
}

// trySend queues msg for sub unless its queue is full (a slow browser):
// the feed never waits for one browser.
func trySend(sub *subscriber, msg message) bool {
	select {
	case sub.ch <- msg:
		return true
	default:
		return false
	}
}

// encodeChange answers the message that brings a browser showing prev to
// showing f: the rectangle that changed, or the whole frame when prev is
// nil, of another size, or mostly changed. A nil data: nothing changed.
func encodeChange(f hostapi.Frame, prev *image.RGBA) (message, error) {
	img := f.Image
	b := img.Bounds()
	if b.Dx() > 0xffff || b.Dy() > 0xffff {
		return message{}, fmt.Errorf("a %dx%d frame is too large to send", b.Dx(), b.Dy())
	}
	rect := b
	if prev != nil && prev.Bounds() == b {
		rect = changedRect(prev, img)
		if rect.Empty() {
			return message{}, nil
		}
	}
	whole := float64(rect.Dx()*rect.Dy()) >= wholeAbove*float64(b.Dx()*b.Dy())
	var data []byte
	kind := byte(kindPNG)
	switch {
	case whole && len(f.Encoded) > 0 && f.EncodedType == "image/jpeg":
		rect, data, kind = b, f.Encoded, kindJPEG // a PiKVM's own JPEG, passed on
	case whole:
		rect = b
		var err error
		if data, _, err = f.PNG(1); err != nil {
			return message{}, err
		}
	default:
		part := image.NewRGBA(image.Rect(0, 0, rect.Dx(), rect.Dy()))
		for y := rect.Min.Y; y < rect.Max.Y; y++ {
			copy(part.Pix[(y-rect.Min.Y)*part.Stride:][:4*rect.Dx()], img.Pix[img.PixOffset(rect.Min.X, y):][:4*rect.Dx()])
		}
		var buf bytes.Buffer
		if err := partEncoder.Encode(&buf, part); err != nil {
			return message{}, err
		}
		data = buf.Bytes()
	}
	out := make([]byte, headerLen, headerLen+len(data))
	out[0] = kind
	for i, v := range []int{rect.Min.X - b.Min.X, rect.Min.Y - b.Min.Y, rect.Dx(), rect.Dy(), b.Dx(), b.Dy()} {
		binary.BigEndian.PutUint16(out[1+2*i:], uint16(v))
	}
	binary.BigEndian.PutUint64(out[13:], uint64(f.At.UnixMilli()))
	return message{data: append(out, data...)}, nil
}

// partEncoder encodes a changed rectangle: small, so the standard encoder
// at its fastest is quick enough (the whole frame takes hostapi's).
var partEncoder = png.Encoder{CompressionLevel: png.BestSpeed}

// changedRect is the smallest rectangle holding every pixel that differs
// between two frames of one size.
func changedRect(a, b *image.RGBA) image.Rectangle {
	r := b.Bounds()
	w := 4 * r.Dx()
	top, bottom := -1, -1
	for y := r.Min.Y; y < r.Max.Y; y++ {
		if !bytes.Equal(a.Pix[a.PixOffset(r.Min.X, y):][:w], b.Pix[b.PixOffset(r.Min.X, y):][:w]) {
			if top < 0 {
				top = y
			}
			bottom = y
		}
	}
	if top < 0 {
		return image.Rectangle{}
	}
	left, right := r.Max.X, r.Min.X-1
	for y := top; y <= bottom; y++ {
		ra, rb := a.Pix[a.PixOffset(r.Min.X, y):][:w], b.Pix[b.PixOffset(r.Min.X, y):][:w]
		for x := 0; x < r.Dx(); x++ {
			if x+r.Min.X >= left && x+r.Min.X <= right {
				continue // already inside
			}
			if !bytes.Equal(ra[4*x:4*x+4], rb[4*x:4*x+4]) {
				left, right = min(left, x+r.Min.X), max(right, x+r.Min.X)
			}
		}
	}
	return image.Rect(left, top, right+1, bottom+1)
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 64 << 10,
	// The default origin check stands: a page of another origin cannot
	// open a console socket with the browser's cookie.
}

// console serves the live console of the caller's VM over a websocket.
// It is view-only: input goes through input (a POST with the CSRF token).
func (s *Server) console(w http.ResponseWriter, r *http.Request, sess *session) {
	watched, _, bench := s.watchVM(w, r, sess)
	if watched == nil {
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer conn.Close()
	f, sub := s.subscribe(bench, watched)
	defer s.unsubscribe(f, sub)
	gone := make(chan struct{})
	go func() { // the browser sends nothing; a read fails when it leaves
		defer close(gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	check := time.NewTicker(sessionCheck)
	defer check.Stop()
	for {
		select {
		case <-gone:
			return
		case <-check.C:
			if !s.sess.alive(sess.id) { // logged out, or expired
				conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "logged out"))
				return
			}
			if err := watched.Recheck(r.Context()); err != nil { // a lease ended, a VM gone
				conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "no longer yours"))
				return
			}
		case msg := <-sub.ch:
			kind := websocket.BinaryMessage
			if msg.text {
				kind = websocket.TextMessage
			}
			conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := conn.WriteMessage(kind, msg.data); err != nil {
				return
			}
		}
	}
}
