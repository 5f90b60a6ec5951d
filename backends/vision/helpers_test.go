package vision

import (
	"fmt"
	"image"
	"image/color"
	"log/slog"
	"testing"

	"github.com/poligon/poligon/internal/testvm"

	"github.com/poligon/poligon/backends/vision/visiontest"
	"golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// testKey is recognisable, so a test can grep for it anywhere.
const testKey = "sk-SECRET-123"

// uiFrame draws a w x h screen with a menu bar, a sidebar list, a form of
// buttons and labels and a terminal panel (realistic for PNG cost), and
// answers its elements in frame pixels.
func uiFrame(w, h int) (*image.RGBA, []visiontest.Element) {
	im := image.NewRGBA(image.Rect(0, 0, w, h))
	fill := func(r image.Rectangle, c color.RGBA) { draw.Draw(im, r, &image.Uniform{c}, image.Point{}, draw.Src) }
	fill(im.Bounds(), color.RGBA{240, 240, 240, 255})
	fill(image.Rect(0, 0, w, 28), color.RGBA{50, 50, 60, 255})
	fill(image.Rect(0, 28, w/6, h), color.RGBA{225, 228, 232, 255})
	d := &font.Drawer{Dst: im, Src: image.Black, Face: basicfont.Face7x13}
	text := func(x, y int, s string) { d.Dot = fixed.P(x, y); d.DrawString(s) }
	var els []visiontest.Element
	d.Src = image.White
	for i, m := range []string{"File", "Edit", "View", "Help"} {
		text(10+i*60, 19, m)
		els = append(els, visiontest.Element{X: 10 + i*60 + 14, Y: 14, Type: "menu", Label: m})
	}
	d.Src = image.Black
	for i := 0; i < (h-60)/24 && i < 30; i++ {
		s := fmt.Sprintf("Sidebar item %d", i)
		text(12, 50+i*24, s)
		els = append(els, visiontest.Element{X: 12 + len(s)*7/2, Y: 46 + i*24, Type: "list item", Label: s})
	}
	for i := 0; i < (h-80)/28 && i < 25; i++ {
		bx := w/6 + 40
		fill(image.Rect(bx, 50+i*28, bx+120, 72+i*28), color.RGBA{60, 110, 200, 255})
		s := fmt.Sprintf("Field %d: value %x", i, i*7919)
		text(bx+140, 66+i*28, s)
		els = append(els, visiontest.Element{X: bx + 60, Y: 61 + i*28, Type: "button", Label: fmt.Sprintf("Action %d", i)})
	}
	fill(image.Rect(w*5/8, 100, w-30, h-100), color.RGBA{20, 20, 20, 255})
	d.Src = image.White
	for i := 0; i < (h-220)/14; i++ {
		text(w*5/8+10, 115+i*14, fmt.Sprintf("root@host:~# journalctl -u svc%d | tail -n %d", i, i*3))
	}
	return im, els
}

// logBuffer captures a logger's output for greps.
type logBuffer struct{ testvm.SyncBuffer }

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testClient makes a client of srv with ep's settings over the defaults.
func testClient(t testing.TB, srv *visiontest.Server, ep Endpoint, o Options) *Client {
	t.Helper()
	if ep.Purpose == "" {
		ep.Purpose = PurposeVision
	}
	if ep.URL == "" {
		ep.URL = srv.ChatURL()
	}
	if ep.Model == "" {
		ep.Model = "holo2-4b"
	}
	if ep.Key == "" {
		ep.Key = testKey
	}
	c, err := New(ep, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newServer(t testing.TB) *visiontest.Server {
	s := visiontest.New()
	t.Cleanup(s.Close)
	return s
}

func reply(content string) visiontest.Reply { return visiontest.Reply{Content: content} }
