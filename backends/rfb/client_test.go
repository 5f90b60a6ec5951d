package rfb

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/backendtest"
)

// keyLines renders recorded input as "down ctrl", "up a", ... for comparison.
func keyLines(msgs [][]byte) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(describe(msgs)), "\n") {
		if i := strings.Index(line, "# ext "); i >= 0 {
			f := strings.Fields(line[i+len("# ext "):])
			out = append(out, f[0]+" "+f[1])
		}
	}
	return out
}

func expectedKeyLines(t *testing.T, events []inputEvent) []string {
	t.Helper()
	var out []string
	for _, ev := range events {
		out = append(out, strings.TrimSpace(upDown(ev.down))+" "+ev.key.Name)
	}
	return out
}

func TestReconnectResumesTypingWithoutLossOrRepeat(t *testing.T) {
	srv := newFakeServer(t)
	srv.dropAfter = 5 // a↓ a↑ b↓ b↑ c↓, then the connection dies
	c := connect(t, Config{Dial: srv.dial, KeyDelay: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const text = "abcdefgh"
	if err := c.Type(ctx, text); err != nil {
		t.Fatal(err)
	}
	c.Close()
	strokes, _ := TextStrokes(text)
	want := expectedKeyLines(t, textEvents(strokes, 0))
	got := keyLines(srv.finished())
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("server received\n%v\nwant\n%v", got, want)
	}
	if srv.dials != 2 {
		t.Errorf("dialled %d times, want 2", srv.dials)
	}
}

func TestReconnectPressesHeldKeysAgain(t *testing.T) {
	// QEMU lifts all keys when a VNC client goes away: a combo cut in the
	// middle must hold its modifiers again on the new connection.
	srv := newFakeServer(t)
	srv.dropAfter = 2 // ctrl↓ alt↓
	c := connect(t, Config{Dial: srv.dial, KeyDelay: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Key(ctx, "ctrl-alt-delete"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	got := strings.Join(keyLines(srv.finished()), ",")
	want := "down ctrl,down alt,down ctrl,down alt,down delete,up delete,up alt,up ctrl"
	if got != want {
		t.Errorf("server received %s\nwant %s", got, want)
	}
}

// flakyDialer wraps a dialer so tests can make dials fail and cut conns.
// A failing dial answers err ("server unreachable" when nil).
type flakyDialer struct {
	dial  Dialer
	err   error
	mu    sync.Mutex
	fail  bool
	conns []net.Conn
}

func (d *flakyDialer) Dial(ctx context.Context) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail {
		if d.err != nil {
			return nil, d.err
		}
		return nil, errors.New("server unreachable (test)")
	}
	c, err := d.dial(ctx)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *flakyDialer) cut(fail bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = fail
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

func (d *flakyDialer) setFail(fail bool) {
	d.mu.Lock()
	d.fail = fail
	d.mu.Unlock()
}

func TestFrameAndInputDuringReconnect(t *testing.T) {
	srv := newFakeServer(t)
	fd := &flakyDialer{dial: srv.dial}
	c := connect(t, Config{Dial: fd.Dial, KeyDelay: -1})
	before, changed, err := c.Frame(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fd.cut(true) // the connection drops and redials fail
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		down := c.live == nil && c.lastErr != nil && strings.Contains(c.lastErr.Error(), "unreachable")
		c.mu.Unlock()
		if down {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client did not notice the dropped connection and the failed redial")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Frame answers the last frame.
	f, changed2, err := c.Frame(context.Background())
	if err != nil || f.Rect != before.Rect || !changed2.Equal(changed) {
		t.Fatalf("Frame during reconnect = %v, %v, %v", f.Rect, changed2, err)
	}
	// Input waits within its ctx and says why it gave up.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = c.Key(ctx, "a")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "server unreachable (test)") {
		t.Fatalf("Key while disconnected = %v", err)
	}
	// Input in flight resumes once the server is back: the server comes
	// back only once the call waits for it, so a call that gave up at
	// once, or one that started after the reconnect, cannot pass.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), backendtest.HangGuard)
		defer cancel()
		done <- c.Key(ctx, "b")
	}()
	backendtest.WaitParked(t, "rfb.(*Client).liveLink", func() bool { return len(done) > 0 })
	fd.setFail(false)
	if err := <-done; err != nil {
		t.Fatalf("Key after reconnect: %v", err)
	}
	c.Close()
	if got := strings.Join(keyLines(srv.finished()), ","); got != "down b,up b" {
		t.Errorf("server received %s, want only b", got)
	}
}

func TestVNCAuthAgainstFakeServer(t *testing.T) {
	srv := newFakeServer(t)
	srv.password = "secret12"
	connect(t, Config{Dial: srv.dial, Password: "secret12XYZ"}) // only 8 characters count

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Connect(ctx, Config{Dial: srv.dial, Password: "wrong-pass"})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong password: %v, want ErrAuth", err)
	}
	if strings.Contains(err.Error(), "wrong-pass") {
		t.Fatalf("the error shows the password: %v", err)
	}
	if !strings.Contains(err.Error(), "Authentication failed") || strings.Contains(err.Error(), "\x00") {
		t.Errorf("error should carry the server's reason without its NUL: %q", err)
	}
	_, err = Connect(ctx, Config{Dial: srv.dial})
	if err == nil || !strings.Contains(err.Error(), "requires a password") {
		t.Errorf("no password: %v", err)
	}
}

func TestRFB33Server(t *testing.T) {
	for _, password := range []string{"", "pw"} {
		srv := newFakeServer(t)
		srv.version = "003.003"
		srv.password = password
		c := connect(t, Config{Dial: srv.dial, Password: password, KeyDelay: -1})
		if err := c.Key(context.Background(), "ret"); err != nil {
			t.Fatal(err)
		}
		if password != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := Connect(ctx, Config{Dial: srv.dial, Password: "nope"})
			cancel()
			if !errors.Is(err, ErrAuth) {
				t.Errorf("3.3 wrong password: %v, want ErrAuth", err)
			}
		}
	}
}

func TestVNCAuthResponse(t *testing.T) {
	// Known answer from openssl: DES-ECB of 00..0f under the bit-reversed key
	// of "password" (0e86ceceeef64e26); QEMU accepts the same scheme in
	// TestQEMUVNCAuth.
	challenge := [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	got := vncAuthResponse(challenge, "password")
	if want := "b866924125c8eebb9debc1db61c538e2"; hex.EncodeToString(got[:]) != want {
		t.Errorf("response %x, want %s", got, want)
	}
	if vncAuthResponse(challenge, "passwordEXTRA") != got {
		t.Error("the response depends on characters past the 8th")
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Connect(ctx, Config{}); err == nil || !strings.Contains(err.Error(), "Dial is required") {
		t.Errorf("no Dial: %v", err)
	}
	srv := newFakeServer(t)
	if _, err := Connect(ctx, Config{Dial: srv.dial, Encodings: []int32{5}}); err == nil || !strings.Contains(err.Error(), "encoding 5 is not supported") {
		t.Errorf("hextile: %v", err)
	}
}

func TestConcurrentFrameAndInput(t *testing.T) {
	srv := newFakeServer(t)
	c := connect(t, Config{Dial: srv.dial, KeyDelay: -1})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if _, _, err := c.Frame(ctx); err != nil {
					t.Error(err)
				}
				c.Size()
				c.Updated()
			}
		}()
		go func() {
			defer wg.Done()
			if err := c.Type(ctx, "xy"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	c.Close()
	// Input calls are serialized: each "xy" arrives whole.
	got := strings.Join(keyLines(srv.finished()), ",")
	want := strings.Repeat("down x,up x,down y,up y,", 4)
	if got+"," != want {
		t.Errorf("server received %s", got)
	}
	if _, _, err := c.Frame(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Frame after Close = %v", err)
	}
	if err := c.Key(ctx, "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Key after Close = %v", err)
	}
}

func TestCancelledComboReleasesHeldKeys(t *testing.T) {
	srv := newFakeServer(t)
	c := connect(t, Config{Dial: srv.dial, KeyDelay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		srv.waitInput(t, 1) // ctrl↓, then the long pause
		cancel()
	}()
	if err := c.Key(ctx, "ctrl-alt-delete"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Key = %v, want context.Canceled", err)
	}
	c.Close()
	got := strings.Join(keyLines(srv.finished()), ",")
	if want := "down ctrl,up ctrl"; got != want {
		t.Errorf("server received %s, want %s", got, want)
	}
}

// scriptedServer answers the handshake with fixed bytes after the version,
// then hangs up.
func scriptedServer(reply []byte) Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			server.Write([]byte("RFB 003.008\n"))
			var v [12]byte
			if _, err := io.ReadFull(server, v[:]); err != nil {
				return
			}
			server.Write(reply)
			server.Read(make([]byte, 1)) // the client's security choice, if any; then hang up
		}()
		return client, nil
	}
}

func TestHandshakeRefusals(t *testing.T) {
	reason := "Too many connections"
	refusal := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(reason)))
	cases := map[string]struct {
		reply []byte
		want  string
	}{
		"refused":          {append(refusal, reason...), "refused the connection: Too many connections"},
		"only VeNCrypt":    {[]byte{1, 19}, "offers security types [19]"},
		"not RFB":          {nil, ""},
		"truncated result": {[]byte{1, 1, 0, 0}, "security result"},
	}
	for name, tc := range cases {
		if tc.reply == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := Connect(ctx, Config{Dial: scriptedServer(tc.reply)})
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to contain %q", name, err, tc.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Connect(ctx, Config{Dial: func(context.Context) (net.Conn, error) {
		client, server := net.Pipe()
		go func() { server.Write([]byte("HTTP/1.1 400\n")); server.Close() }()
		return client, nil
	}})
	if err == nil || !strings.Contains(err.Error(), "not an RFB server") {
		t.Errorf("HTTP server: %v", err)
	}
}
