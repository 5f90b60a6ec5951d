package pikvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/internal/fastjpeg"
)

// streamerWarmup is how long after opening the stream a 503 snapshot means
// "the streamer is still starting" (uStreamer opens the capture device
// first) rather than "it is down".
const streamerWarmup = 15 * time.Second

// maxSnapshot bounds one JPEG (a 1920x1200 frame is well under 1 MB).
const maxSnapshot = 32 << 20

// screen is the PiKVM's console. kvmd runs its streamer only while a
// websocket client with stream=1 is connected, so the screen holds one open
// while it is used and closes it after StreamIdle without a call. Frames
// are snapshots fetched on demand: a frame is never older than the call.
type screen struct {
	b *Bench

	streamMu sync.Mutex
	ws       *websocket.Conn
	wsOpened time.Time
	wsDone   chan struct{}
	idle     *time.Timer

	frameMu sync.Mutex
	jpeg    []byte      // the last snapshot as received
	img     *image.RGBA // decoded
	changed time.Time   // when the pixels last differed from the frame before
	block   image.Point // the JPEG's MCU
	width   int         // the real frame's size (uStreamer's headers)
	height  int

	inputMu sync.Mutex // one input action at a time: events of two never interleave
}

var (
	_ backends.Screen        = (*screen)(nil)
	_ backends.LossyScreen   = (*screen)(nil)
	_ backends.EncodedScreen = (*screen)(nil)
)

// Console answers the machine's screen; vmid is ignored (a PiKVM has one).
// It opens the stream, so the first frame is quick.
func (b *Bench) Console(ctx context.Context, vmid int) (backends.Screen, error) {
	b.mu.Lock()
	if b.screen == nil {
		b.screen = &screen{b: b}
	}
	s := b.screen
	b.mu.Unlock()
	if _, err := s.ensureStream(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// ensureStream opens the stream websocket unless it is open, resets its
// idle timer, and answers when it was opened.
func (s *screen) ensureStream(ctx context.Context) (time.Time, error) {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.ws != nil {
		select {
		case <-s.wsDone:
			s.ws = nil // kvmd closed it: open another
		default:
			s.idle.Reset(s.b.idle)
			return s.wsOpened, nil
		}
	}
	b := s.b
	u := "wss" + strings.TrimPrefix(b.base, "https") + "/api/ws?stream=1"
	hdr := http.Header{}
	b.authHeaders(hdr)
	d := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		TLSClientConfig:  b.tls,
		HandshakeTimeout: 10 * time.Second,
	}
	conn, resp, err := d.DialContext(ctx, u, hdr)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			return time.Time{}, b.apiError("open the stream (/api/ws)", resp)
		}
		return time.Time{}, b.wrapErr("open the stream (/api/ws)", err)
	}
	conn.SetReadLimit(16 << 20) // kvmd's full states (many images) are the largest
	done := make(chan struct{})
	s.ws, s.wsOpened, s.wsDone = conn, time.Now(), done
	if s.idle == nil {
		s.idle = time.AfterFunc(b.idle, s.closeStream)
	} else {
		s.idle.Reset(b.idle)
	}
	b.log.Info("pikvm: stream opened", "api", b.base)
	// Read everything kvmd sends (state events) and drop it; reading also
	// answers kvmd's heartbeat pings.
	go func() {
		defer close(done)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				b.log.Info("pikvm: stream closed", "api", b.base, "why", b.scrub(err.Error()))
				return
			}
		}
	}()
	return s.wsOpened, nil
}

// closeStream closes the websocket (the streamer stops after its delay).
func (s *screen) closeStream() {
	s.streamMu.Lock()
	conn, done := s.ws, s.wsDone
	s.ws = nil
	if s.idle != nil {
		s.idle.Stop()
	}
	s.streamMu.Unlock()
	if conn == nil {
		return
	}
	conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	conn.Close()
	<-done
}

// Frame answers the current frame and when its pixels last changed.
func (s *screen) Frame(ctx context.Context) (*image.RGBA, time.Time, error) {
	img, _, changed, err := s.frame(ctx)
	return img, changed, err
}

// EncodedFrame is Frame with the JPEG its pixels were decoded from.
func (s *screen) EncodedFrame(ctx context.Context) (*image.RGBA, []byte, string, time.Time, error) {
	img, data, changed, err := s.frame(ctx)
	return img, data, "image/jpeg", changed, err
}

// frame fetches a snapshot and answers a copy of its pixels with the JPEG
// they came from.
func (s *screen) frame(ctx context.Context) (*image.RGBA, []byte, time.Time, error) {
	opened, err := s.ensureStream(ctx)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	s.frameMu.Lock()
	defer s.frameMu.Unlock()
	data, w, h, err := s.snapshot(ctx, opened)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	if s.img == nil || !bytes.Equal(data, s.jpeg) {
		img, block, err := fastjpeg.Decode(data)
		if err != nil {
			return nil, nil, time.Time{}, s.b.wrapErr("snapshot", fmt.Errorf("the JPEG does not decode: %w", err))
		}
		if s.img == nil || s.img.Rect != img.Rect || !bytes.Equal(s.img.Pix, img.Pix) {
			s.changed = time.Now()
		}
		s.img, s.jpeg, s.block = img, data, block
	}
	s.width, s.height = w, h
	if w <= 0 || h <= 0 {
		s.width, s.height = s.img.Rect.Dx(), s.img.Rect.Dy()
	}
	cp := image.NewRGBA(s.img.Rect)
	copy(cp.Pix, s.img.Pix)
	return cp, s.jpeg, s.changed, nil
}

// snapshot fetches one JPEG with allow_offline, so no signal is told
// apart from a streamer that is down, and answers uStreamer's frame size.
func (s *screen) snapshot(ctx context.Context, opened time.Time) ([]byte, int, int, error) {
	b := s.b
	const op = "snapshot"
	for {
		resp, err := b.request(ctx, op, "GET", "/streamer/snapshot", url.Values{"allow_offline": {"1"}}, nil)
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
			if time.Since(opened) < streamerWarmup {
				select { // the streamer is still starting
				case <-ctx.Done():
					return nil, 0, 0, b.wrapErr(op, fmt.Errorf("waiting for the streamer to start: %w", ctx.Err()))
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			ae.hint = "kvmd's streamer does not run although a stream client is connected: the capture device may be missing or ustreamer failing (the PiKVM's web UI or journalctl -u kvmd tells); the operator may restart kvmd"
			return nil, 0, 0, ae
		}
		if err != nil {
			return nil, 0, 0, err
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxSnapshot+1))
		resp.Body.Close()
		if err != nil {
			return nil, 0, 0, b.wrapErr(op, err)
		}
		if len(data) > maxSnapshot {
			return nil, 0, 0, b.wrapErr(op, fmt.Errorf("the snapshot is larger than %d MiB", maxSnapshot>>20))
		}
		if resp.Header.Get("X-UStreamer-Online") == "false" {
			return nil, 0, 0, backends.WithHint(fmt.Errorf("pikvm: %s: %w from the machine", op, backends.ErrNoSignal),
				"the machine's screen is dark: it may be off (bench_power status), asleep, or its video cable unplugged")
		}
		if len(data) < 3 || data[0] != 0xff || data[1] != 0xd8 || data[2] != 0xff {
			head := data[:min(len(data), 8)]
			return nil, 0, 0, &backends.Failure{
				Text:   fmt.Sprintf("pikvm: %s: the answer is not a JPEG (%d bytes, %s, starting % x)", op, len(data), resp.Header.Get("Content-Type"), head),
				Advice: "this kvmd sends another format (GL.iNet's fork sends H.264 labelled image/jpeg): this backend needs PiKVM's kvmd with uStreamer's JPEG snapshots",
			}
		}
		w, _ := strconv.Atoi(resp.Header.Get("X-UStreamer-Width"))
		h, _ := strconv.Atoi(resp.Header.Get("X-UStreamer-Height"))
		return data, w, h, nil
	}
}

// FrameBlock is the MCU of the last JPEG (uStreamer's are 4:2:0: 16x16).
func (s *screen) FrameBlock() image.Point {
	s.frameMu.Lock()
	defer s.frameMu.Unlock()
	if s.block == (image.Point{}) {
		return image.Pt(16, 16)
	}
	return s.block
}

// size answers the real frame's size, fetching a frame when none was seen.
func (s *screen) size(ctx context.Context) (int, int, error) {
	s.frameMu.Lock()
	w, h := s.width, s.height
	s.frameMu.Unlock()
	if w > 0 && h > 0 {
		return w, h, nil
	}
	if _, _, err := s.Frame(ctx); err != nil {
		return 0, 0, err
	}
	s.frameMu.Lock()
	defer s.frameMu.Unlock()
	return s.width, s.height, nil
}
