package hostapi_test

// Screen reading as hostapi owns it: label matching and its order (OCR,
// the cached element list, grounding), the element cache, the stale-frame
// guard and the text waits. Real OCR (tesseract) reads a real frame of
// tiny-x's xterms (backends/ocr/testdata); the models are visiontest's
// wire-level fake.

import (
	"context"
	"image"
	"image/draw"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/backends/ocr"
	"github.com/poligon/poligon/backends/vision"
	"github.com/poligon/poligon/backends/vision/visiontest"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/testvm"
)

// The shared reader: its engines start once for the package's tests.
var (
	readerOnce sync.Once
	reader     *ocr.Reader
)

func sharedReader(t testing.TB) *ocr.Reader {
	readerOnce.Do(func() { reader = ocr.New(ocr.Config{}) })
	if err := reader.Check(); err != nil {
		t.Fatalf("OCR must work for these tests (tools/deps.sh installs it): %v", err)
	}
	return reader
}

func screens(t testing.TB) *image.RGBA {
	return testvm.LoadPNG(t, "../backends/ocr/testdata/screens.png")
}

// eyes makes alice's VM 101 show screens.png, with OCR and, when fake is
// set, the fake as vision and grounding model.
func eyes(t testing.TB, fake *visiontest.Server) (*backendtest.Backend, *hostapi.VM, context.Context) {
	t.Helper()
	be, env, ctx := bench(t)
	env.MaxWait = time.Minute // these tests read screens; the cap is TestScreenWaitCaps'
	env.Eyes = &hostapi.Eyes{OCR: sharedReader(t)}
	if fake != nil {
		c, err := vision.New(vision.Endpoint{Purpose: "vision", URL: fake.ChatURL(), Model: "holo", Coords: "permille"}, vision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		env.Eyes.Vision = c
	}
	be.Screen(101).SetFrame(screens(t))
	v, _ := lock(t, ctx, alice(t, ctx, env, be), 101)
	return be, v, ctx
}

// cellA is where xterm A (+10+10, 6x13 cells) draws n characters at row, col.
func cellA(row, col, n int) image.Rectangle {
	return image.Rect(12+6*col, 12+13*row, 12+6*(col+n), 12+13*(row+1))
}

func clicks(be *backendtest.Backend) []string {
	var out []string
	for _, c := range be.CallsOf("Click") {
		out = append(out, c.String())
	}
	return out
}

func TestClickLabelByOCR(t *testing.T) {
	be, v, ctx := eyes(t, nil)
	// Only in xterm A: the reverse-video row, asked with Latin look-alikes
	// for nothing and a lowercase start.
	lc, err := v.ClickLabel(ctx, "selected row", "", "left", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	want := cellA(10, 2, len("Selected row"))
	if lc.Source != "ocr" || !lc.Point.In(want.Inset(-3)) || !lc.Spot.Selected {
		t.Errorf("clicked %+v, want source ocr inside %v on a selected row", lc, want)
	}
	// Cyrillic written half in Latin look-alikes (B, p, a, c, o, e are Latin here).
	lc, err = v.ClickLabel(ctx, "Bыбpaннaя cтpoкa", "", "left", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if lc.Source != "ocr" || lc.Point.X < 640 || lc.Point.Y > 160 {
		t.Errorf("Cyrillic label: %+v, want the highlighted row of xterm B", lc)
	}
	got := clicks(be)
	if len(got) != 2 || !strings.HasSuffix(got[1], "left 2") {
		t.Errorf("clicks = %q, want two, the second a double click", got)
	}
}

func TestClickLabelRefusesToGuess(t *testing.T) {
	be, v, ctx := eyes(t, nil)
	// "Cancel" is on screen twice (xterms A and C): an error naming both.
	_, err := v.ClickLabel(ctx, "Cancel", "", "left", 1, "")
	if err == nil || !strings.Contains(err.Error(), "matches 2 places") {
		t.Errorf("ambiguous label: err = %v", err)
	}
	// Not on screen, and no model to ask.
	_, err = v.ClickLabel(ctx, "Reboot now", "", "left", 1, "")
	if err == nil || !strings.Contains(err.Error(), "not on the screen") {
		t.Errorf("absent label: err = %v", err)
	}
	for _, bad := range []struct{ label, kind, want string }{
		{"", "", "label is empty"},
		{"   ", "", "label is empty"},
		{"...", "", "no letters or digits"},
		{strings.Repeat("x", 201), "", "at most 200"},
		{"OK", "spinner", `unknown kind "spinner"`},
	} {
		_, err := v.ClickLabel(ctx, bad.label, bad.kind, "left", 1, "")
		if err == nil || !strings.Contains(err.Error(), bad.want) || hostapi.HintOf(err) == "" {
			t.Errorf("label %.10q kind %q: err = %v, want %q with a hint", bad.label, bad.kind, err, bad.want)
		}
	}
	if got := clicks(be); len(got) != 0 {
		t.Errorf("refused calls clicked: %q", got)
	}
}

func TestClickLabelFallsBackToElementsThenGrounding(t *testing.T) {
	fake := visiontest.New()
	defer fake.Close()
	fake.SetTruth(&visiontest.Truth{Coords: "permille", W: 1280, H: 800, Elements: []visiontest.Element{
		{X: 1200, Y: 760, Type: "icon", Label: "Trash"},
		{X: 1250, Y: 10, Type: "icon", Label: "Power"},
		{X: 40, Y: 700, Type: "button", Label: "Settings"},
	}})
	be, v, ctx := eyes(t, fake)
	f, err := v.Shot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := v.See(ctx, f, nil)
	if err != nil || len(s.Elements) != 3 || s.Cached {
		t.Fatalf("See = %+v, %v", s, err)
	}
	// The list of this frame is cached: "Trash" comes from it, no model call.
	before := fake.Count()
	lc, err := v.ClickLabel(ctx, "trash", "", "left", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := lc.Point.Sub(image.Pt(1200, 760)); lc.Source != "elements" || d.X*d.X+d.Y*d.Y > 8 || fake.Count() != before {
		t.Errorf("Trash: %+v after %d model calls, want source elements at 1200,760 and none", lc, fake.Count()-before)
	}
	// kind narrows the list: Settings is a button, not an icon, so the
	// grounding model is asked, and finds it.
	lc, err = v.ClickLabel(ctx, "Settings", "icon", "left", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if lc.Source != "grounding" || fake.Count() != before+1 {
		t.Errorf("Settings as an icon: %+v, want source grounding after one model call", lc)
	}
	// On a new frame no list is cached: the grounding model is next.
	changed := screens(t)
	draw.Draw(changed, image.Rect(600, 600, 700, 650), image.White, image.Point{}, draw.Src)
	be.Screen(101).SetFrame(changed)
	lc, err = v.ClickLabel(ctx, "Trash", "", "left", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if lc.Source != "grounding" || fake.Count() != before+2 {
		t.Errorf("Trash on a new frame: %+v, want source grounding after one more model call", lc)
	}
	// A grounding point in the top bar is "not found", and clicks nothing.
	n := len(clicks(be))
	_, err = v.ClickLabel(ctx, "Power", "icon", "left", 1, "")
	if err == nil || !strings.Contains(err.Error(), "top 30 px") {
		t.Errorf("Power in the top bar: err = %v", err)
	}
	if len(clicks(be)) != n {
		t.Errorf("a refused grounding point was clicked")
	}
}

func TestElementCache(t *testing.T) {
	fake := visiontest.New()
	defer fake.Close()
	_, v, ctx := eyes(t, fake)
	f, err := v.Shot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A capped answer is served as incomplete and not kept.
	fake.Reply(visiontest.Reply{Content: "640\t400\tbutton\tOK\n100\t", Finish: "length"})
	s, err := v.See(ctx, f, nil)
	if err != nil || s.Complete || len(s.Elements) != 1 {
		t.Fatalf("capped: %+v, %v", s, err)
	}
	// Two callers at once on the same frame: one model call.
	hold := make(chan struct{})
	fake.Reply(visiontest.Reply{Content: "500\t500\tbutton\tOK", Hold: hold})
	var wg sync.WaitGroup
	results := make([]hostapi.Seeing, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = v.See(ctx, f, nil)
		}()
	}
	for fake.Count() < 2 { // the capped call, then the held one
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()
	if fake.Count() != 2 || results[0].Cached == results[1].Cached {
		t.Errorf("two at once: %d model calls, cached %v/%v; want 2 calls in all, one served from the other", fake.Count(), results[0].Cached, results[1].Cached)
	}
	// The same frame later: the cache, whoever asks.
	s, err = v.See(ctx, f, nil)
	if err != nil || !s.Cached || fake.Count() != 2 {
		t.Errorf("again: cached=%v after %d calls (%v)", s.Cached, fake.Count(), err)
	}
	// A window's list answers another question: never cached.
	fake.Reply(visiontest.Reply{Content: "10\t10\tbutton\tOK"}, visiontest.Reply{Content: "10\t10\tbutton\tOK"})
	w := &hostapi.Window{ID: "0x1", Title: "xterm", Box: image.Rect(10, 10, 500, 170)}
	for i := 0; i < 2; i++ {
		if s, err := v.See(ctx, f, w); err != nil || s.Cached {
			t.Errorf("window list %d: cached=%v, %v", i, s.Cached, err)
		}
	}
	if fake.Count() != 4 {
		t.Errorf("window lists: %d model calls in all, want 4", fake.Count())
	}
}

func TestStaleFrameGuard(t *testing.T) {
	be, v, ctx := eyes(t, nil)
	f, err := v.Shot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	digest := v.Remember(f)
	if err := v.Click(ctx, 100, 100, "left", 1, "00feed"); err == nil || !strings.Contains(err.Error(), "not one this server answered") {
		t.Errorf("unknown frame: %v", err)
	}
	// Far from the change: allowed. Near it: refused, nothing clicked.
	changed := screens(t)
	draw.Draw(changed, image.Rect(600, 600, 700, 650), image.White, image.Point{}, draw.Src)
	be.Screen(101).SetFrame(changed)
	if err := v.Click(ctx, 100, 100, "left", 1, digest); err != nil {
		t.Errorf("click far from the change: %v", err)
	}
	n := len(clicks(be))
	err = v.Click(ctx, 650, 640, "left", 1, digest)
	if err == nil || !strings.Contains(err.Error(), "changed near") || len(clicks(be)) != n {
		t.Errorf("click on the change: err = %v, clicks %d -> %d", err, n, len(clicks(be)))
	}
	if err := v.Drag(ctx, 10, 10, 640, 610, digest); err == nil {
		t.Errorf("drag ending on the change was not refused")
	}
}

func TestWaitText(t *testing.T) {
	be, v, ctx := eyes(t, nil)
	blank := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	be.Screen(101).SetFrame(blank)
	// Absent until the timeout: no error, no spot.
	w, err := v.WaitText(ctx, "Selected row", 300*time.Millisecond)
	if err != nil || w.Spot != nil {
		t.Fatalf("absent: %+v, %v", w, err)
	}
	done := make(chan hostapi.TextWait)
	go func() {
		w, err := v.WaitText(ctx, "Selected row", 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- w
	}()
	be.Screen(101).SetFrame(screens(t))
	w = <-done
	if w.Spot == nil || !w.Spot.Selected {
		t.Errorf("WaitText = %+v, want the selected row", w)
	}
}
