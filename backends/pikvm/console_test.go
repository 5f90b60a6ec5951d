package pikvm

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"image"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pikvm/kvmdtest"
)

// rawClient talks to the fake directly, trusting its certificate.
func rawClient(t testing.TB, srv *kvmdtest.Server) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CertPEM())
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// rawCall sends a request with the test credentials and answers the status,
// the envelope's error class (if any) and the response.
func rawCall(t testing.TB, c *http.Client, method, url string) (int, string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("X-KVMD-User", testUser)
	req.Header.Set("X-KVMD-Passwd", testPassword)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var env struct {
		OK     bool `json:"ok"`
		Result struct {
			Error string `json:"error"`
		} `json:"result"`
	}
	json.Unmarshal(body, &env)
	return resp.StatusCode, env.Result.Error, resp
}

// meanDiff is the mean absolute difference of the RGB channels.
func meanDiff(a, b *image.RGBA) float64 {
	if a.Rect != b.Rect {
		return 255
	}
	var sum int
	for i := 0; i < len(a.Pix); i += 4 {
		for c := range 3 {
			d := int(a.Pix[i+c]) - int(b.Pix[i+c])
			if d < 0 {
				d = -d
			}
			sum += d
		}
	}
	return float64(sum) / float64(len(a.Pix)/4*3)
}

// tty1 writes to the guest's VGA console, with the blinking cursor hidden
// so the screen holds still.
func tty1(t testing.TB, vmAgent func(string) string, text string) {
	t.Helper()
	vmAgent(`printf '\033[?25l` + text + `' >/dev/tty1`)
}

// A snapshot is the machine's screen: it matches QEMU's own screendump of
// it (within JPEG's loss), and a different screen does not.
func TestSnapshotShowsConsole(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	ctx := testContext(t)
	run := func(cmd string) string { return mustGuest(t, agent, cmd) }

	tty1(t, run, `\033[H\033[J`+strings.Repeat("KVMDTEST SNAPSHOT 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ\\n", 20))
	var text *image.RGBA
	if err := eventually(ctx, func() bool {
		img, _, err := s.Frame(ctx)
		if err != nil {
			t.Fatal(seen(err))
		}
		text = img
		dump, err := vm.Screendump(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := meanDiff(img, dump)
		t.Logf("mean difference to the screendump: %.2f", d)
		return d < 4
	}); err != nil {
		t.Fatal("the snapshot never matched QEMU's screendump of the console")
	}
	if got := text.Bounds().Size(); got != image.Pt(720, 400) {
		t.Errorf("frame size %v, want the 720x400 text console", got)
	}
	w, h, _ := s.size(ctx)
	if w != 720 || h != 400 {
		t.Errorf("size from uStreamer's headers %dx%d, want 720x400", w, h)
	}
	if b := s.FrameBlock(); b != image.Pt(16, 16) {
		t.Errorf("the JPEG's block is %v, want 4:2:0's 16x16 (the settle waits allow for it)", b)
	}

	tty1(t, run, `\033[H\033[J`)
	if err := eventually(ctx, func() bool {
		img, _, err := s.Frame(ctx)
		if err != nil {
			t.Fatal(seen(err))
		}
		d := meanDiff(img, text)
		t.Logf("mean difference to the text screen: %.2f", d)
		return d > 10
	}); err != nil {
		t.Fatal("clearing the console did not change the snapshot")
	}
}

// The frame's change time moves only when its pixels change: the ui_
// tools' settle and change waits rely on it.
func TestFrameChangeTime(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	ctx := testContext(t)
	run := func(cmd string) string { return mustGuest(t, agent, cmd) }

	tty1(t, run, `\033[H\033[Jstill\n`)
	var first *image.RGBA
	var at time.Time
	if err := eventually(ctx, func() bool { // until the write above shows
		img, ts, err := s.Frame(ctx)
		if err != nil {
			t.Fatal(seen(err))
		}
		same := first != nil && meanDiff(img, first) == 0
		first, at = img, ts
		return same
	}); err != nil {
		t.Fatal(err)
	}
	calls := len(srv.Calls())
	for range 5 {
		img, ts, err := s.Frame(ctx)
		if err != nil {
			t.Fatal(seen(err))
		}
		if meanDiff(img, first) != 0 || !ts.Equal(at) {
			t.Fatalf("an unchanged screen moved the change time from %v to %v", at, ts)
		}
	}
	if got := len(srv.Calls()) - calls; got != 5 {
		t.Errorf("5 frames made %d requests, want one snapshot each (frames are never stale)", got)
	}

	tty1(t, run, `changed\n`)
	if err := eventually(ctx, func() bool {
		img, ts, err := s.Frame(ctx)
		if err != nil {
			t.Fatal(seen(err))
		}
		if meanDiff(img, first) == 0 {
			if !ts.Equal(at) {
				t.Fatalf("the change time moved before the pixels did")
			}
			return false
		}
		if !ts.After(at) {
			t.Fatalf("the pixels changed but the change time stayed at %v", at)
		}
		return true
	}); err != nil {
		t.Fatal("the console write never showed")
	}
}

// kvmd's streamer runs only while a websocket stream client is connected:
// without one a snapshot is 503; the bench holds one while its screen is
// used and lets go when closed.
func TestStreamerNeedsAStreamClient(t *testing.T) {
	vm, _ := machine(t)
	opts := fakeOpts(vm)
	opts.StreamerStop = 200 * time.Millisecond
	srv := startFake(t, opts)
	raw := rawClient(t, srv)
	snap := srv.URL() + "/api/streamer/snapshot"
	if status, class, _ := rawCall(t, raw, "GET", snap); status != 503 || class != "UnavailableError" {
		t.Fatalf("a snapshot without a stream client answered %d %s, want 503 UnavailableError", status, class)
	}

	b := newBench(t, srv, nil)
	s := screenOf(t, b)
	if n := srv.StreamClients(); n != 1 {
		t.Fatalf("%d stream clients after Console, want 1", n)
	}
	if _, _, err := s.Frame(testContext(t)); err != nil { // waits out the streamer's start
		t.Fatal(seen(err))
	}
	if status, _, resp := rawCall(t, raw, "GET", snap); status != 200 || resp.Header.Get("Content-Type") != "image/jpeg" {
		t.Fatalf("a snapshot with the stream held answered %d %s", status, resp.Header.Get("Content-Type"))
	}

	b.Close()
	ctx := testContext(t)
	if err := eventually(ctx, func() bool {
		status, _, _ := rawCall(t, raw, "GET", snap)
		return srv.StreamClients() == 0 && status == 503
	}); err != nil {
		t.Fatal("the streamer kept running after the bench closed its stream")
	}
	// The bench reopens the stream by itself.
	if _, _, err := s.Frame(ctx); err != nil {
		t.Fatal(seen(err))
	}
}

// The bench answers kvmd's heartbeat pings, so kvmd keeps its stream.
func TestStreamSurvivesHeartbeats(t *testing.T) {
	vm, _ := machine(t)
	opts := fakeOpts(vm)
	opts.Heartbeat = 100 * time.Millisecond
	srv := startFake(t, opts)
	s := screenOf(t, newBench(t, srv, nil))
	s.streamMu.Lock()
	done := s.wsDone
	s.streamMu.Unlock()
	select {
	case <-done:
		t.Fatal("kvmd dropped the stream: the bench missed its heartbeat")
	case <-time.After(time.Second): // ten heartbeats
	}
}

// No video signal is an error wrapping ErrNoSignal with a hint, told apart
// from a streamer that is down (the bench asks with allow_offline).
func TestNoSignal(t *testing.T) {
	vm, _ := machine(t)
	srv := startFake(t, fakeOpts(vm))
	s := screenOf(t, newBench(t, srv, nil))
	ctx := testContext(t)
	if _, _, err := s.Frame(ctx); err != nil {
		t.Fatal(seen(err))
	}
	srv.SetSignal(false)
	_, _, err := s.Frame(ctx)
	text := seen(err)
	if !errors.Is(err, backends.ErrNoSignal) || backends.HintOf(err) == "" {
		t.Fatalf("no signal answered %v, want ErrNoSignal with a hint", text)
	}
	raw := rawClient(t, srv)
	if status, _, _ := rawCall(t, raw, "GET", srv.URL()+"/api/streamer/snapshot"); status != 503 {
		t.Errorf("offline snapshot without allow_offline answered %d, want 503", status)
	}
	if status, _, resp := rawCall(t, raw, "GET", srv.URL()+"/api/streamer/snapshot?allow_offline=1"); status != 200 || resp.Header.Get("X-UStreamer-Online") != "false" {
		t.Errorf("offline snapshot with allow_offline answered %d online=%q", status, resp.Header.Get("X-UStreamer-Online"))
	}
	srv.SetSignal(true)
	if _, _, err := s.Frame(ctx); err != nil {
		t.Fatal(seen(err))
	}
}
