package hostapi_test

// The screen waits on a PiKVM: kvmdtest's fake kvmd in front of a real
// QEMU machine, whose VGA text console (cursor blinking) it serves as
// uStreamer does, JPEG at quality 80.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/backends/pikvm"
	"github.com/poligon/poligon/backends/pikvm/kvmdtest"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/testvm"
)

// kvmdBench is a PiKVM as hostapi sees it: the machine is vmid 1 of
// backendtest's record, its console the kvmd client's.
type kvmdBench struct {
	*backendtest.Backend
	kvm *pikvm.Bench
}

func (b kvmdBench) Console(ctx context.Context, vmid int) (backends.Screen, error) {
	return b.kvm.Console(ctx, vmid)
}

// kvmdConsole boots the fake's machine and answers alice's VM on it, the
// fake (capturing at most every period; 0: kvmd's 1/30 s), a shell in the
// guest and a context capping the test.
func kvmdConsole(t testing.TB, period time.Duration) (*hostapi.VM, *kvmdtest.Server, func(string), context.Context) {
	t.Helper()
	testvm.RequireQEMU(t)
	vm := kvmdtest.TinyVM(t)
	srv, err := kvmdtest.New(kvmdtest.Options{VM: vm, User: "admin", Password: "admin-pw", StreamerStart: 100 * time.Millisecond, FramePeriod: period})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	kvm, err := pikvm.New(pikvm.Config{URL: srv.URL(), User: "admin", Password: "admin-pw", CAFile: srv.CAFile(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kvm.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), backendtest.HangGuard)
	t.Cleanup(cancel)
	agent, err := vm.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	sh := func(cmd string) {
		t.Helper()
		if err := guestRun(ctx, agent, cmd); err != nil {
			t.Fatal(err)
		}
	}
	be := backendtest.New("pikvm")
	be.AddVM(backends.VM{VMID: 1, Name: "alice-repro-kvm", Status: "running"})
	// The screen waits are capped at MaxWait: these tests wait for screens,
	// not for the cap (TestScreenWaitCaps).
	env := &hostapi.Env{Locks: hostapi.NewLocks(""), MaxWait: time.Minute, BusyWait: busyWait}
	c, err := hostapi.NewCaller(ctx, env, "alice", "bench:kvm", kvmdBench{be, kvm})
	if err != nil {
		t.Fatal(err)
	}
	v, release, err := c.LockVM(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return v, srv, sh, ctx
}

func rawTLS(t testing.TB, srv *kvmdtest.Server) *tls.Config {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.CertPEM()) {
		t.Fatal("the fake's certificate does not parse")
	}
	return &tls.Config{RootCAs: pool}
}

// guestRun runs a shell command in the guest and waits for it.
func guestRun(ctx context.Context, a *qga.Client, cmd string) error {
	pid, err := a.Exec(ctx, qga.ExecRequest{Path: "/bin/sh", Args: []string{"-c", cmd}, CaptureOutput: true})
	if err != nil {
		return err
	}
	for {
		st, err := a.ExecStatus(ctx, pid)
		if err != nil {
			return err
		}
		if st.Exited {
			if st.ExitCode != 0 {
				return fmt.Errorf("guest command %q exited %d: %s%s", cmd, st.ExitCode, st.Stdout, st.Stderr)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// changedBox is the bounding box of the pixels that differ.
func changedBox(a, b *image.RGBA) image.Rectangle {
	var box image.Rectangle
	w := a.Rect.Dx()
	for i := 0; i < len(a.Pix); i += 4 {
		if !bytes.Equal(a.Pix[i:i+3], b.Pix[i:i+3]) {
			p := image.Pt((i/4)%w, (i/4)/w)
			box = box.Union(image.Rectangle{Min: p, Max: p.Add(image.Pt(1, 1))})
		}
	}
	return box
}

func snapshots(srv *kvmdtest.Server) int {
	n := 0
	for _, c := range srv.Calls() {
		if strings.HasPrefix(c, "GET /api/streamer/snapshot") {
			n++
		}
	}
	return n
}

// An idle text console whose cursor blinks settles on a PiKVM, though
// JPEG spreads each blink over the compression blocks around the cursor;
// the blink is no change, and a word written elsewhere is one.
func TestSettleOnAJPEGConsole(t *testing.T) {
	v, srv, sh, ctx := kvmdConsole(t, 0)
	sh(`printf '\033[?25h\033[H\033[Jpoligon waits for a still screen\n$ ' >/dev/tty1`)

	// The fake must show what a PiKVM shows: the cursor blinks, and in
	// JPEG a blink changes more than the 9x16 cell the cursor is in.
	prev, err := v.Shot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := v.Shot(ctx)
		if err != nil {
			t.Fatalf("waiting for the cursor to blink: %v", err)
		}
		if box := changedBox(prev.Image, f.Image); !box.Empty() {
			t.Logf("a blink changed %v", box)
			if box.Dx() <= 9 && box.Dy() <= 16 {
				// the text above was still being drawn, or this is no JPEG
				prev = f
				continue
			}
			break
		}
		prev = f
		time.Sleep(50 * time.Millisecond)
	}

	s, err := v.WaitStill(ctx, 0, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !s.OK {
		t.Fatalf("the idle console never settled (waited %.1f s): its blinking cursor counts as a change", s.Elapsed.Seconds())
	}
	if c, err := v.WaitChange(ctx, 2*time.Second); err != nil || c.OK { // several blinks
		t.Fatalf("WaitChange on the idle console = %+v, %v: the blinking cursor counts as a change", c.OK, err)
	}

	// A word elsewhere, written once the wait has its first frame.
	type result struct {
		s   hostapi.Settle
		err error
	}
	done := make(chan result, 1)
	before := snapshots(srv)
	go func() {
		s, err := v.WaitChange(ctx, time.Minute)
		done <- result{s, err}
	}()
	looked := time.After(time.Minute)
	for snapshots(srv) < before+2 { // the first look, and one after it
		select {
		case r := <-done:
			t.Fatalf("the wait ended before its second look (%+v, %v): an idle console counted as a change", r.s.OK, r.err)
		case <-looked:
			t.Fatal("the wait took fewer than two looks in a minute")
		case <-time.After(10 * time.Millisecond):
		}
	}
	sh(`printf '\0337\033[12;30Hchanged\0338' >/dev/tty1`)
	r := <-done
	if r.err != nil || !r.s.OK {
		t.Fatalf("a word written on the console was not seen as a change: %+v, %v", r.s.OK, r.err)
	}
	if box := changedBox(prev.Image, r.s.Frame.Image); box.Min.Y > 11*16+15 || box.Max.Y < 11*16 {
		t.Errorf("the change seen (%v) is not the word on row 12", box)
	}
}

// A frame's PNG decodes (with the standard decoder) to the frame's pixels,
// whatever its size, its crop and the bands it was deflated in; scaled, to
// the scaled size; encoded again, to the same bytes.
func TestFramePNG(t *testing.T) {
	noisy := func(w, h int) *image.RGBA { // JPEG-like: every pixel differs a little
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for i := range img.Pix {
			img.Pix[i] = byte(i*7 + i/4*13 + (i/4/w)*3)
			if i%4 == 3 {
				img.Pix[i] = 0xff
			}
		}
		return img
	}
	screen := image.NewRGBA(screens(t).Rect)
	copy(screen.Pix, screens(t).Pix)
	for _, c := range []struct {
		name string
		img  *image.RGBA
	}{
		{"1x1", noisy(1, 1)},
		{"3x5", noisy(3, 5)},
		{"720x400", noisy(720, 400)},
		{"1920x1080", noisy(1920, 1080)},
		{"a desktop", screen},
		{"a crop", screen.SubImage(image.Rect(101, 37, 613, 290)).(*image.RGBA)},
	} {
		data, shown, err := hostapi.Frame{Image: c.img}.PNG(1)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if shown != c.img.Rect {
			t.Errorf("%s: shown %v, want %v", c.name, shown, c.img.Rect)
		}
		got, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: the PNG does not decode: %v", c.name, err)
		}
		b := c.img.Rect
		if got.Bounds().Size() != b.Size() {
			t.Fatalf("%s: decoded %v, want %v", c.name, got.Bounds(), b)
		}
		rgba, ok := got.(*image.RGBA) // an 8-bit RGB PNG decodes to RGBA
		if !ok {
			t.Fatalf("%s: decoded a %T", c.name, got)
		}
		for y := 0; y < b.Dy(); y++ {
			want := c.img.Pix[c.img.PixOffset(b.Min.X, b.Min.Y+y):][:4*b.Dx()]
			if row := rgba.Pix[rgba.PixOffset(0, y):][:4*b.Dx()]; !bytes.Equal(row, want) {
				t.Fatalf("%s: row %d decoded otherwise", c.name, y)
			}
		}
		if again, _, _ := (hostapi.Frame{Image: c.img}).PNG(1); !bytes.Equal(again, data) {
			t.Errorf("%s: encoded twice, two PNGs", c.name)
		}
	}
	data, shown, err := hostapi.Frame{Image: screen}.PNG(0.5)
	if err != nil {
		t.Fatal(err)
	}
	got, err := png.Decode(bytes.NewReader(data))
	if err != nil || got.Bounds() != shown || shown.Dx() != (screen.Rect.Dx()+1)/2 {
		t.Fatalf("scaled by 0.5: %v shown %v, %v", got.Bounds(), shown, err)
	}
}

// ui_screenshot on a PiKVM against a raw GET of kvmd's snapshot, both over
// TLS to the same fake, alternating: the screenshot is the GET plus the
// JPEG's decoding (for the frame's digest, the waits and the guard) and the
// image the answer carries (kvmd's JPEG itself, unscaled). The
// fake captures afresh for every request (uStreamer serves its latest
// frame; here neither side may reuse a capture the other paid for).
// "changing" writes to the console before each round, so every screenshot
// decodes and encodes a new frame; "static" repeats one screen.
func BenchmarkPiKVMScreenshot(b *testing.B) {
	v, srv, sh, ctx := kvmdConsole(b, time.Nanosecond)
	sh(`printf '\033[?25l\033[H\033[J' >/dev/tty1; for i in $(seq 24); do echo "for f in /etc/*.conf; do wc -l $f; done # $i 0123456789 ABCDEFGHIJ" >/dev/tty1; done`)
	raw := &http.Client{Transport: &http.Transport{TLSClientConfig: rawTLS(b, srv)}}
	b.Cleanup(raw.CloseIdleConnections)
	get := func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL()+"/api/streamer/snapshot?allow_offline=1", nil)
		req.Header.Set("X-KVMD-User", "admin")
		req.Header.Set("X-KVMD-Passwd", "admin-pw")
		resp, err := raw.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("snapshot: %d", resp.StatusCode)
		}
	}
	shot := func() {
		f, err := v.Shot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		f.Digest()
		if _, _, _, err := f.Encode(1); err != nil { // what the answer carries
			b.Fatal(err)
		}
	}
	for _, changing := range []bool{false, true} {
		name := "static"
		if changing {
			name = "changing"
		}
		b.Run(name, func(b *testing.B) {
			shot() // the stream is open, the streamer started
			get()
			var tGet, tShot time.Duration
			b.ResetTimer()
			for i := range b.N {
				if changing {
					b.StopTimer()
					sh(fmt.Sprintf(`printf '\0337\033[25;1Hround %d\0338' >/dev/tty1`, i))
					b.StartTimer()
				}
				t0 := time.Now()
				get()
				t1 := time.Now()
				shot()
				tGet, tShot = tGet+t1.Sub(t0), tShot+time.Since(t1)
			}
			n := float64(b.N)
			b.ReportMetric(tGet.Seconds()*1000/n, "get-ms")
			b.ReportMetric(tShot.Seconds()*1000/n, "screenshot-ms")
			b.ReportMetric(float64(tShot)/float64(tGet), "screenshot/get")
		})
	}
}

// A PiKVM screenshot shown whole carries kvmd's own JPEG, not a second
// encoding of its pixels; scaled, it is a PNG of the scaled pixels.
func TestPiKVMScreenshotIsItsJPEG(t *testing.T) {
	v, _, sh, ctx := kvmdConsole(t, 0)
	sh(`printf '\033[H\033[Jthe JPEG as it came\n' >/dev/tty1`)
	f, err := v.Shot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, mime, shown, err := f.Encode(1)
	if err != nil || mime != "image/jpeg" || shown != f.Image.Bounds() || !bytes.Equal(data, f.Encoded) {
		t.Fatalf("Encode(1) = %d bytes of %s, %v, %v", len(data), mime, shown, err)
	}
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	got := image.NewRGBA(img.Bounds())
	draw.Draw(got, got.Bounds(), img, img.Bounds().Min, draw.Src)
	// The frame was decoded by libjpeg-turbo where it is installed: the
	// same picture, to the rounding of another IDCT.
	off := 0
	for i := range got.Pix {
		if d := int(got.Pix[i]) - int(f.Image.Pix[i]); d > 8 || d < -8 {
			off++
		}
	}
	if got.Rect != f.Image.Rect || off > len(got.Pix)/100 {
		t.Fatalf("the JPEG carried is not the frame's pixels: %d of %d bytes differ by more than 8", off, len(got.Pix))
	}
	if _, mime, shown, err := f.Encode(0.5); err != nil || mime != "image/png" || shown.Dx() != (f.Image.Bounds().Dx()+1)/2 {
		t.Fatalf("Encode(0.5) = %s %v, %v", mime, shown, err)
	}
}
