package web

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/latency"
	"github.com/poligon/poligon/internal/testvm"
)

// liveBench is a booted tiny VM, its console open, and a browser.
type liveBench struct {
	e       *liveEnv
	vmid    int
	screen  backends.Screen
	browser context.Context
}

func newLiveBench(b *testing.B) *liveBench {
	b.Helper()
	data := testvm.DataDir(b)
	browser := newBrowser(b)
	e := newEnv(b, testConfig(b, data), app.Options{}, Options{})
	vmid := e.bootTiny(b, "bench")
	who, err := e.app.Caller(context.Background(), e.app.Local(), "")
	if err != nil {
		b.Fatal(err)
	}
	screen, err := who.Backend().(backends.Console).Console(context.Background(), vmid)
	if err != nil {
		b.Fatal(err)
	}
	return &liveBench{e: e, vmid: vmid, screen: screen, browser: browser}
}

// watch opens the VM's page in a tab of its own and waits for its first
// frame.
func (l *liveBench) watch(b *testing.B) context.Context {
	b.Helper()
	page := tab(b, l.browser)
	login(b, page, l.e.url, aliceToken)
	do(b, page, chromedp.Navigate(fmt.Sprintf("%s/ui/vm/local/%d", l.e.url, l.vmid)))
	waitFor(b, page, `Number(document.getElementById("console").dataset.frames || 0) > 0`, 30*time.Second)
	return page
}

// drawn is one frame drawn on the page's canvas.
type drawn struct {
	Changed, Drawn int64 // Unix ms: the change seen by poligon, drawn
	X, Y, W, H     int
}

// BenchmarkConsoleLatency: a key typed on the VM's console to the echoed
// character drawn on the browser's canvas (the guest's echo, QEMU's VNC
// update, poligon's feed, the socket and the browser's decode and draw),
// p50 and p95; split at the console client's change clock into the part
// before poligon sees the change (vnc-: the guest and QEMU) and the part
// after (feed-: poligon's poll and encoding, the socket, the browser).
func BenchmarkConsoleLatency(b *testing.B) {
	l := newLiveBench(b)
	page := l.watch(b)
	eval[bool](b, page, `(() => { window.draws = [];
		document.getElementById("console").addEventListener("poligon:frame", e => window.draws.push(e.detail)); return true })()`)
	ctx := context.Background()
	// next waits for the first frame drawn after since that changed a
	// glyph (the cursor's blink changes its underline, two rows high).
	var log []drawn
	next := func(since time.Time) drawn {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			ds := eval[[]drawn](b, page, `(() => { const d = window.draws; window.draws = []; return d.map(x => ({Changed: x.changed, Drawn: x.drawn, X: x.x, Y: x.y, W: x.w, H: x.h})) })()`)
			log = append(log, ds...)
			for _, d := range ds {
				if d.Drawn >= since.UnixMilli() && d.H > 4 {
					return d
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.Fatalf("no frame drawn within 10 s of a key at %d: %v", since.UnixMilli(), log[max(0, len(log)-30):])
		return drawn{}
	}
	var total, vnc, feed latency.Latencies
	for b.Loop() {
		start := time.Now()
		if err := l.screen.Type(ctx, "x"); err != nil {
			b.Fatal(err)
		}
		d := next(start)
		total = append(total, time.Duration(d.Drawn-start.UnixMilli())*time.Millisecond)
		vnc = append(vnc, time.Duration(d.Changed-start.UnixMilli())*time.Millisecond)
		feed = append(feed, time.Duration(d.Drawn-d.Changed)*time.Millisecond)
		erase := time.Now()
		l.screen.Key(ctx, "backspace")
		next(erase)
		time.Sleep(50 * time.Millisecond)
	}
	b.ReportMetric(total.Quantile(0.5), "p50-ms")
	b.ReportMetric(total.Quantile(0.95), "p95-ms")
	b.ReportMetric(vnc.Quantile(0.5), "vnc-p50-ms")
	b.ReportMetric(vnc.Quantile(0.95), "vnc-p95-ms")
	b.ReportMetric(feed.Quantile(0.5), "feed-p50-ms")
	b.ReportMetric(feed.Quantile(0.95), "feed-p95-ms")
}

// BenchmarkWatchers: ui_screenshot's p50 and ui_type's speed with five
// browsers watching the VM, against none (the same VM, the same calls).
func BenchmarkWatchers(b *testing.B) {
	l := newLiveBench(b)
	const shots, typings = 40, 6
	text := strings.Repeat("abcdefghij", 4) + "\n" // the shell answers "not found": the screen scrolls
	measure := func() (shotP50, charsPerSec float64) {
		var ds latency.Latencies
		for range shots {
			ds.Time(func() { l.e.call(b, "ui_screenshot", map[string]any{"vmid": l.vmid}) })
		}
		var typed time.Duration
		for range typings {
			start := time.Now()
			l.e.call(b, "ui_type", map[string]any{"vmid": l.vmid, "text": text})
			typed += time.Since(start)
			time.Sleep(200 * time.Millisecond) // the shell answers
		}
		return ds.Quantile(0.5), float64(typings*len(text)) / typed.Seconds()
	}
	measure() // warm: the console, the encoder
	for b.Loop() {
		shot0, type0 := measure()
		var pages []context.Context
		for range 5 {
			pages = append(pages, l.watch(b))
		}
		if n := l.e.web.Watchers(); n != 5 {
			b.Fatalf("%d browsers watch, want 5", n)
		}
		shot5, type5 := measure()
		frames := 0
		for _, p := range pages {
			frames += eval[int](b, p, `Number(document.getElementById("console").dataset.frames)`)
		}
		b.ReportMetric(shot0, "shot-p50-ms-alone")
		b.ReportMetric(shot5, "shot-p50-ms-5-watching")
		b.ReportMetric(shot5/shot0, "shot-ratio")
		b.ReportMetric(type0, "type-chars/s-alone")
		b.ReportMetric(type5, "type-chars/s-5-watching")
		b.ReportMetric(type5/type0, "type-ratio")
		b.ReportMetric(float64(frames)/5, "frames-per-watcher")
	}
}
