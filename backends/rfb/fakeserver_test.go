package rfb

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer speaks the server side of RFB 3.8 over net.Pipe connections:
// security None (or VNC auth), a small raw framebuffer, QEMU's
// ExtendedKeyEvent ack when asked, and a record of every key and pointer
// message the client sends. It sends no updates after the first frame.
type fakeServer struct {
	t        testing.TB
	width    int
	height   int
	extKeys  bool   // acknowledge QEMU ExtendedKeyEvent
	password string // non-empty: VNC auth
	version  string // protocol version it announces; default "003.008"

	wg     sync.WaitGroup // serving goroutines
	mu     sync.Mutex
	conns  []net.Conn
	input  [][]byte // key/pointer messages, across connections, in order
	dials  int
	notify chan struct{} // receives after each recorded input message
	// dropAfter, when > 0, closes the connection after that many input
	// messages were recorded on it (once).
	dropAfter int
	// screen, when set, answers non-incremental requests as QEMU does
	// (see fresh.go).
	screen *fakeScreen
}

// fakeScreen is what a QEMU-like fake server shows: a grey shade the test
// changes without the server sending anything (QEMU's refresh timer backed
// off), and an update made before the next request that is still on its
// way when the server echoes that request. The refresh that answers a
// request comes at once, or, after a stale update, with the next request
// (so a client that takes the stale update for the answer is caught).
type fakeScreen struct {
	mu    sync.Mutex
	shade byte
	stale *byte
}

func (s *fakeScreen) set(shade byte, stale *byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shade, s.stale = shade, stale
}

// answer is QEMU's answer to a non-incremental request: the echo at once,
// then the stale update if one is on its way, else the forced update.
func (f *fakeServer) answer(w io.Writer) {
	s := f.screen
	s.mu.Lock()
	shade, stale := s.shade, s.stale
	s.stale = nil
	s.mu.Unlock()
	echo := []byte{0, 0, 0, 1, 0, 0, 0, 0}
	echo = binary.BigEndian.AppendUint16(echo, uint16(f.width))
	echo = binary.BigEndian.AppendUint16(echo, uint16(f.height))
	enc := EncodingExtendedDesktopSize
	echo = binary.BigEndian.AppendUint32(echo, uint32(enc))
	echo = append(echo, 1, 0, 0, 0) // one screen
	echo = append(echo, make([]byte, 16)...)
	w.Write(echo)
	if stale != nil {
		w.Write(f.frameOf(*stale))
		return
	}
	w.Write(f.frameOf(shade))
}

// frameOf is a full raw update of one grey shade.
func (f *fakeServer) frameOf(shade byte) []byte {
	upd := []byte{0, 0, 0, 1, 0, 0, 0, 0}
	upd = binary.BigEndian.AppendUint16(upd, uint16(f.width))
	upd = binary.BigEndian.AppendUint16(upd, uint16(f.height))
	upd = append(upd, 0, 0, 0, 0)
	for i := 0; i < f.width*f.height; i++ {
		upd = append(upd, shade, shade, shade, 0)
	}
	return upd
}

func newFakeServer(t testing.TB) *fakeServer {
	return &fakeServer{t: t, width: 64, height: 48, extKeys: true, notify: make(chan struct{}, 1024)}
}

func (f *fakeServer) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	f.mu.Lock()
	f.dials++
	f.conns = append(f.conns, server)
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.serve(server)
	}()
	return client, nil
}

// finished waits until every connection was served to its end (close the
// client first), so everything the client wrote is recorded.
func (f *fakeServer) finished() [][]byte {
	f.wg.Wait()
	return f.recorded()
}

func (f *fakeServer) recorded() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.input...)
}

func (f *fakeServer) serve(pipe net.Conn) {
	defer pipe.Close()
	r := bufio.NewReader(pipe)
	if err := f.handshake(pipe, r); err != nil {
		return
	}
	// Writes go through a queue, as into a socket's buffer: net.Pipe has none,
	// and a server blocked writing while the client writes would deadlock.
	conn := newQueuedWriter(pipe)
	defer conn.Close()
	onConn := 0
	for {
		t, err := r.ReadByte()
		if err != nil {
			return
		}
		var msg []byte
		switch t {
		case msgSetPixelFormat:
			msg = make([]byte, 19)
		case msgSetEncodings:
			h := make([]byte, 3)
			if _, err := io.ReadFull(r, h); err != nil {
				return
			}
			n := int(binary.BigEndian.Uint16(h[1:]))
			encs := make([]byte, 4*n)
			if _, err := io.ReadFull(r, encs); err != nil {
				return
			}
			wantExt := false
			for i := 0; i < n; i++ {
				if int32(binary.BigEndian.Uint32(encs[4*i:])) == EncodingQEMUExtendedKey {
					wantExt = true
				}
			}
			if wantExt && f.extKeys {
				conn.Write([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xfe, 0xfe}) // -258 ack rect
			}
			continue
		case msgFramebufferUpdateRequest:
			msg = make([]byte, 9)
			if _, err := io.ReadFull(r, msg); err != nil {
				return
			}
			if msg[0] == 0 { // non-incremental
				if f.screen == nil {
					conn.Write(f.frameOf(0)) // the first frame, black
				} else {
					f.answer(conn)
				}
			}
			continue
		case msgKeyEvent:
			msg = make([]byte, 7)
		case msgPointerEvent:
			msg = make([]byte, 5)
		case msgQEMU:
			msg = make([]byte, 11)
		default:
			f.t.Errorf("fake server: unexpected client message type %d", t)
			return
		}
		if _, err := io.ReadFull(r, msg); err != nil {
			return
		}
		if t == msgSetPixelFormat {
			continue
		}
		f.mu.Lock()
		f.input = append(f.input, append([]byte{t}, msg...))
		onConn++
		drop := f.dropAfter > 0 && onConn == f.dropAfter
		if drop {
			f.dropAfter = 0
		}
		f.mu.Unlock()
		f.notify <- struct{}{}
		if drop {
			return
		}
	}
}

func (f *fakeServer) handshake(conn net.Conn, r *bufio.Reader) error {
	version := f.version
	if version == "" {
		version = "003.008"
	}
	io.WriteString(conn, "RFB "+version+"\n")
	var v [12]byte
	if _, err := io.ReadFull(r, v[:]); err != nil {
		return err
	}
	old := string(v[:]) == "RFB 003.003\n"
	secType := byte(securityNone)
	if f.password != "" {
		secType = securityVNCAuth
	}
	if old { // 3.3: the server decides, as a U32
		conn.Write([]byte{0, 0, 0, secType})
	} else {
		conn.Write([]byte{1, secType})
		chosen, err := r.ReadByte()
		if err != nil || chosen != secType {
			return errors.New("bad security type")
		}
	}
	if secType == securityVNCAuth {
		challenge := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
		conn.Write(challenge[:])
		var resp [16]byte
		if _, err := io.ReadFull(r, resp[:]); err != nil {
			return err
		}
		if resp != vncAuthResponse(challenge, f.password) {
			reason := "Authentication failed\x00"
			msg := []byte{0, 0, 0, 1}
			if !old { // only 3.8 gives a reason
				msg = binary.BigEndian.AppendUint32(msg, uint32(len(reason)))
				msg = append(msg, reason...)
			}
			conn.Write(msg)
			return errors.New("wrong password")
		}
	}
	if !old || secType == securityVNCAuth {
		conn.Write([]byte{0, 0, 0, 0}) // SecurityResult OK
	}
	if _, err := r.ReadByte(); err != nil { // ClientInit
		return err
	}
	init := binary.BigEndian.AppendUint16(nil, uint16(f.width))
	init = binary.BigEndian.AppendUint16(init, uint16(f.height))
	init = append(init, pixelFormat[:]...)
	init = binary.BigEndian.AppendUint32(init, 4)
	init = append(init, "fake"...)
	_, err := conn.Write(init)
	return err
}

// waitInput waits until n input messages were recorded.
func (f *fakeServer) waitInput(t testing.TB, n int) [][]byte {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if got := f.recorded(); len(got) >= n {
			return got
		}
		select {
		case <-f.notify:
		case <-deadline:
			t.Fatalf("fake server got %d input messages, want %d", len(f.recorded()), n)
		}
	}
}

// describe renders recorded input messages one per line: hex bytes, then
// what they mean, so goldens are readable and diffs point at the key.
func describe(msgs [][]byte) string {
	names := map[uint32]string{}
	for _, k := range keyTable {
		if _, ok := names[k.Scancode]; !ok {
			names[k.Scancode] = k.Name
		}
	}
	var b strings.Builder
	for _, m := range msgs {
		hex := fmt.Sprintf("% x", m)
		switch m[0] {
		case msgQEMU:
			down := binary.BigEndian.Uint16(m[2:]) == 1
			sym := binary.BigEndian.Uint32(m[4:])
			code := binary.BigEndian.Uint32(m[8:])
			fmt.Fprintf(&b, "%-36s # ext %s %s keysym %#x scancode %#x\n", hex, upDown(down), names[code], sym, code)
		case msgKeyEvent:
			sym := binary.BigEndian.Uint32(m[4:])
			fmt.Fprintf(&b, "%-36s # key %s keysym %#x\n", hex, upDown(m[1] == 1), sym)
		case msgPointerEvent:
			fmt.Fprintf(&b, "%-36s # pointer mask %05b at (%d,%d)\n", hex, m[1], binary.BigEndian.Uint16(m[2:]), binary.BigEndian.Uint16(m[4:]))
		}
	}
	return b.String()
}

func upDown(down bool) string {
	if down {
		return "down"
	}
	return "up  "
}

// queuedWriter writes from its own goroutine.
type queuedWriter struct {
	w    io.Writer
	q    chan []byte
	done chan struct{}
}

func newQueuedWriter(w io.Writer) *queuedWriter {
	qw := &queuedWriter{w: w, q: make(chan []byte, 64), done: make(chan struct{})}
	go func() {
		defer close(qw.done)
		for b := range qw.q {
			if _, err := qw.w.Write(b); err != nil {
				for range qw.q {
				}
				return
			}
		}
	}()
	return qw
}

func (qw *queuedWriter) Write(b []byte) (int, error) {
	qw.q <- append([]byte(nil), b...)
	return len(b), nil
}

func (qw *queuedWriter) Close() { close(qw.q) }
