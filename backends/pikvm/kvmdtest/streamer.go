package kvmdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// streamer is kvmd's stream controller plus uStreamer: it runs while a
// websocket client wants the stream (stream=1, the default), is ready
// StreamerStart after the first one came, and stops StreamerStop after the
// last one left. A snapshot is the latest captured frame: a screendump of
// the machine at most FramePeriod old.
type streamer struct {
	s *Server

	mu        sync.Mutex
	clients   int
	readyAt   time.Time   // when the running streamer serves frames
	running   bool        // a client came and the stop delay has not passed since the last left
	stopTimer *time.Timer // pending stop after the last client left
	signal    bool        // the HDMI cable (SetSignal)
	width     int         // the last frame's size, for the no-signal placeholder
	height    int
	conns     map[*websocket.Conn]bool

	capMu    sync.Mutex // one capture at a time
	frame    []byte     // the latest JPEG
	frameAt  time.Time
	frameW   int
	frameH   int
	grabbed  time.Time
	encoded  [2]time.Time
	captures int
}

func newStreamer(s *Server) *streamer {
	return &streamer{s: s, signal: true, width: 640, height: 480, conns: map[*websocket.Conn]bool{}}
}

func (st *streamer) setSignal(on bool) {
	st.mu.Lock()
	st.signal = on
	st.mu.Unlock()
}

func (st *streamer) clientCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.clients
}

func (st *streamer) addClient() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.clients++
	if st.stopTimer != nil {
		st.stopTimer.Stop()
		st.stopTimer = nil
	}
	if !st.running {
		st.running = true
		st.readyAt = time.Now().Add(st.s.opts.StreamerStart)
	}
}

func (st *streamer) removeClient() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.clients--
	if st.clients > 0 {
		return
	}
	st.stopTimer = time.AfterFunc(st.s.opts.StreamerStop, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.clients == 0 {
			st.running = false
			st.stopTimer = nil
		}
	})
}

func (st *streamer) ready() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.running && !time.Now().Before(st.readyAt)
}

func (st *streamer) close() {
	st.mu.Lock()
	conns := make([]*websocket.Conn, 0, len(st.conns))
	for c := range st.conns {
		conns = append(conns, c)
	}
	if st.stopTimer != nil {
		st.stopTimer.Stop()
	}
	st.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (st *streamer) state(http.ResponseWriter, *http.Request) (any, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var streamer any
	if st.running && !time.Now().Before(st.readyAt) {
		streamer = map[string]any{
			"encoder": map[string]any{"type": "CPU", "quality": st.s.opts.Quality},
			"source": map[string]any{
				"online": st.signal, "desired_fps": 30, "captured_fps": 30,
				"resolution": map[string]int{"width": st.width, "height": st.height},
			},
			"stream": map[string]any{"queued_fps": 0, "clients": 0, "clients_stat": map[string]any{}},
		}
	}
	return map[string]any{
		"features": map[string]bool{"quality": true, "resolution": false, "h264": false},
		"limits":   map[string]any{"desired_fps": map[string]int{"min": 0, "max": 70}},
		"params":   map[string]any{"desired_fps": 30, "quality": st.s.opts.Quality},
		"snapshot": map[string]any{"saved": nil},
		"streamer": streamer,
	}, nil
}

// snapshot is /streamer/snapshot: 503 while the streamer does not run, or
// when the source is offline and allow_offline is not set; otherwise the
// JPEG with uStreamer's headers (a black placeholder when offline).
func (st *streamer) snapshot(w http.ResponseWriter, r *http.Request) (any, error) {
	allowOffline, err := queryBool(r, "allow_offline", false)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"save", "load", "ocr", "preview"} {
		if _, err := queryBool(r, p, false); err != nil {
			return nil, err
		}
	}
	if !st.ready() {
		st.s.log.Info("kvmdtest: can't connect to streamer (no stream client)")
		return nil, errUnavailable
	}
	st.mu.Lock()
	signal := st.signal
	st.mu.Unlock()
	online := signal
	if online {
		running, err := st.s.vm.Running(r.Context())
		if err != nil {
			return nil, fail(500, "Exception", "%v", err)
		}
		online = running // a machine that is off sends no signal
	}
	if !online && !allowOffline {
		st.s.log.Info("kvmdtest: stream is offline, no signal or so")
		return nil, errUnavailable
	}
	var data []byte
	var wd, ht int
	grab, enc := time.Now(), [2]time.Time{time.Now(), time.Now()}
	if online {
		data, wd, ht, grab, enc, err = st.capture(r.Context())
		if err != nil {
			return nil, fail(500, "Exception", "%v", err)
		}
	} else {
		st.mu.Lock()
		wd, ht = st.width, st.height
		st.mu.Unlock()
		data, err = encodeJPEG(image.NewRGBA(image.Rect(0, 0, wd, ht)), st.s.opts.Quality)
		if err != nil {
			return nil, err
		}
	}
	h := w.Header()
	h.Set("Content-Type", "image/jpeg")
	h.Set("X-UStreamer-Online", strconv.FormatBool(online))
	h.Set("X-UStreamer-Width", strconv.Itoa(wd))
	h.Set("X-UStreamer-Height", strconv.Itoa(ht))
	h.Set("X-UStreamer-Dropped", "0")
	h.Set("X-UStreamer-Grab-Timestamp", stamp(grab))
	h.Set("X-UStreamer-Encode-Begin-Timestamp", stamp(enc[0]))
	h.Set("X-UStreamer-Encode-End-Timestamp", stamp(enc[1]))
	h.Set("X-UStreamer-Send-Timestamp", stamp(time.Now()))
	h.Set("X-Timestamp", stamp(time.Now()))
	h.Set("Cache-Control", "no-store, no-cache, must-revalidate, proxy-revalidate, pre-check=0, post-check=0, max-age=0")
	h.Set("Pragma", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(200)
	w.Write(data)
	return raw, nil
}

func stamp(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMicro())/1e6, 'f', 6, 64) }

// capture answers the latest frame, taking a new one when it is older than
// the capture period.
func (st *streamer) capture(ctx context.Context) ([]byte, int, int, time.Time, [2]time.Time, error) {
	st.capMu.Lock()
	defer st.capMu.Unlock()
	if st.frame != nil && time.Since(st.frameAt) < st.s.opts.FramePeriod {
		return st.frame, st.frameW, st.frameH, st.grabbed, st.encoded, nil
	}
	path := filepath.Join(st.s.dir, "screen.ppm")
	grab := time.Now()
	if err := st.s.vm.Execute(ctx, "screendump", map[string]any{"filename": path}, nil); err != nil {
		return nil, 0, 0, grab, [2]time.Time{}, err
	}
	img, err := readPPM(path)
	if err != nil {
		return nil, 0, 0, grab, [2]time.Time{}, err
	}
	begin := time.Now()
	data, err := encodeJPEG(img, st.s.opts.Quality)
	if err != nil {
		return nil, 0, 0, grab, [2]time.Time{}, err
	}
	b := img.Bounds()
	st.frame, st.frameAt, st.frameW, st.frameH = data, time.Now(), b.Dx(), b.Dy()
	st.grabbed, st.encoded = grab, [2]time.Time{begin, time.Now()}
	st.captures++
	st.mu.Lock()
	st.width, st.height = b.Dx(), b.Dy()
	st.mu.Unlock()
	return data, b.Dx(), b.Dy(), grab, st.encoded, nil
}

func encodeJPEG(img image.Image, quality int) ([]byte, error) {
	var buf bytes.Buffer
	err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality})
	return buf.Bytes(), err
}

// readPPM reads QEMU's screendump (binary P6, maxval 255).
func readPPM(path string) (*image.RGBA, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var w, h, maxv int
	if _, err := fmt.Fscanf(br, "P6\n%d %d\n%d", &w, &h, &maxv); err != nil {
		return nil, fmt.Errorf("screendump %s: %w", path, err)
	}
	if _, err := br.ReadByte(); err != nil { // the one whitespace after maxval
		return nil, err
	}
	if maxv != 255 || w <= 0 || h <= 0 || w > 8192 || h > 8192 {
		return nil, fmt.Errorf("screendump %s: unexpected PPM %dx%d max %d", path, w, h, maxv)
	}
	rgb := make([]byte, 3*w*h)
	if _, err := io.ReadFull(br, rgb); err != nil {
		return nil, err
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i, j := 0, 0; i < len(rgb); i, j = i+3, j+4 {
		img.Pix[j], img.Pix[j+1], img.Pix[j+2], img.Pix[j+3] = rgb[i], rgb[i+1], rgb[i+2], 0xff
	}
	return img, nil
}

// --- the websocket (kvmd/apps/kvmd/server.py, api/hid.py) ----------------------------------------------------

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// serveWS is /api/ws: a stream client (stream=1, the default) keeps the
// streamer running. kvmd greets with its version and the subsystems'
// states, answers ping events with pong, takes HID events (JSON or binary)
// and pings the client every Heartbeat, dropping it when no pong comes
// within half of that (aiohttp's heartbeat).
func (st *streamer) serveWS(w http.ResponseWriter, r *http.Request) (any, error) {
	stream, err := queryBool(r, "stream", true)
	if err != nil {
		return nil, err
	}
	// The client counts from before the 101 goes out: a client that saw its
	// upgrade answered is a stream client already.
	if stream {
		st.addClient()
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		if stream {
			st.removeClient()
		}
		return raw, nil // Upgrade answered already
	}
	st.mu.Lock()
	st.conns[conn] = true
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		delete(st.conns, conn)
		st.mu.Unlock()
		if stream {
			st.removeClient()
		}
		conn.Close()
	}()

	var wmu sync.Mutex
	send := func(eventType string, event any) error {
		b, _ := json.Marshal(map[string]any{"event_type": eventType, "event": event})
		wmu.Lock()
		defer wmu.Unlock()
		conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		return conn.WriteMessage(websocket.TextMessage, b)
	}
	send("loop", map[string]any{"version": map[string]int{"major": 4, "minor": 197}})
	for _, sub := range []struct {
		name string
		fn   handler
	}{{"hid", st.s.hid.state}, {"atx", st.s.atx.state}, {"msd", st.s.msd.state}, {"streamer", st.state}} {
		if v, err := sub.fn(nil, r); err == nil {
			send(sub.name, v)
		}
	}
	send("clients", map[string]int{"count": st.clientCount()})

	// Heartbeat: a ping, then a pong due within half the period.
	hb := st.s.opts.Heartbeat
	pong := make(chan struct{}, 1)
	conn.SetPongHandler(func(string) error {
		select {
		case pong <- struct{}{}:
		default:
		}
		return nil
	})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(hb)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			wmu.Lock()
			err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
			wmu.Unlock()
			if err != nil {
				conn.Close()
				return
			}
			select {
			case <-pong:
			case <-stop:
				return
			case <-time.After(hb / 2):
				st.s.log.Info("kvmdtest: websocket client missed a heartbeat: closing")
				conn.Close()
				return
			}
		}
	}()

	for {
		mt, msg, err := conn.ReadMessage()
		if err != nil {
			return raw, nil
		}
		switch mt {
		case websocket.TextMessage:
			var ev struct {
				Type  string          `json:"event_type"`
				Event json.RawMessage `json:"event"`
			}
			if json.Unmarshal(msg, &ev) != nil {
				continue // kvmd logs and ignores it
			}
			if ev.Type == "ping" {
				send("pong", map[string]any{})
				continue
			}
			st.s.hid.wsEvent(ev.Type, ev.Event)
		case websocket.BinaryMessage:
			if len(msg) >= 1 && msg[0] == 0 {
				wmu.Lock()
				conn.WriteMessage(websocket.BinaryMessage, []byte{255})
				wmu.Unlock()
				continue
			}
			st.s.hid.wsBinary(msg)
		}
	}
}

// wsEvent takes a JSON HID event; invalid ones are ignored, as kvmd does.
func (h *hid) wsEvent(kind string, raw json.RawMessage) {
	switch kind {
	case "key":
		var e struct {
			Key    string `json:"key"`
			State  *bool  `json:"state"`
			Finish bool   `json:"finish"`
		}
		if json.Unmarshal(raw, &e) != nil || e.State == nil {
			return
		}
		if _, ok := webToQcode[e.Key]; ok {
			h.sendKeyEvent(e.Key, *e.State, e.Finish)
		}
	case "mouse_button":
		var e struct {
			Button string `json:"button"`
			State  *bool  `json:"state"`
		}
		if json.Unmarshal(raw, &e) != nil || e.State == nil {
			return
		}
		if _, ok := mouseButtons[e.Button]; ok {
			h.button(e.Button, *e.State)
		}
	case "mouse_move":
		var e struct {
			To *struct{ X, Y int } `json:"to"`
		}
		if json.Unmarshal(raw, &e) != nil || e.To == nil {
			return
		}
		h.move(min(max(e.To.X, -32768), 32767), min(max(e.To.Y, -32768), 32767))
	case "mouse_wheel":
		var e struct {
			Delta struct{ X, Y int } `json:"delta"`
		}
		if json.Unmarshal(raw, &e) == nil {
			h.wheel(min(max(e.Delta.X, -127), 127), min(max(e.Delta.Y, -127), 127))
		}
	}
}

// wsBinary takes a binary HID event: op 1 key, 2 button, 3 move, 5 wheel.
func (h *hid) wsBinary(msg []byte) {
	if len(msg) < 2 {
		return
	}
	switch msg[0] {
	case 1:
		if _, ok := webToQcode[string(msg[2:])]; ok {
			h.sendKeyEvent(string(msg[2:]), msg[1]&1 != 0, msg[1]&2 != 0)
		}
	case 2:
		if _, ok := mouseButtons[string(msg[2:])]; ok {
			h.button(string(msg[2:]), msg[1]&1 != 0)
		}
	case 3:
		if len(msg) == 5 {
			h.move(int(int16(binary.BigEndian.Uint16(msg[1:3]))), int(int16(binary.BigEndian.Uint16(msg[3:5]))))
		}
	case 5:
		for i := 2; i+1 < len(msg); i += 2 {
			h.wheel(int(int8(msg[i])), int(int8(msg[i+1])))
		}
	}
}
