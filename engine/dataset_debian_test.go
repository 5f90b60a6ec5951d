package engine

import (
	"fmt"
	"image"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/testvm"
)

// captureOnDesktop proves the training-dataset capture on the real
// debian-desktop guest of TestDebianDesktop (XFCE, at-spi2-core,
// python3-pyatspi, poligon-form), logged in as test, sharing its boot: a
// second server on the same data and state directories captures while it
// drives the same VM. The guest's own AT-SPI tree and tesseract are the
// ground truth checked:
//   - vm_dataset_app launches a form and its shot carries the app, locale,
//     theme and intent given; the screen mode is set first;
//   - a click on a known button (refused without intent, changing nothing)
//     yields an index line whose AT-SPI box of that button holds the click
//     and whose OCR words have its label;
//   - a window moving while the frame is dumped flags screen_changed;
//   - no python3, no pyatspi, no session: the frame and its OCR are kept
//     with atspi null and the reason; a guest without a dump is not asked
//     again until the recall (shortened here) has passed.
func captureOnDesktop(t *testing.T, desktop *config.Config, vmid int) {
	cfg := *desktop
	dir := t.TempDir()
	cfg.Dataset = config.Dataset{Dir: dir, XRandR: "1280x800", MinFreeMB: 1}
	logged := &testvm.SyncBuffer{}
	s := startServer(t, &cfg, slog.New(slog.NewTextHandler(logged, nil)))
	cs := connect(t, s)
	t.Cleanup(func() {
		for _, line := range strings.Split(logged.String(), "\n") {
			if strings.Contains(line, "dataset ") {
				t.Log(line)
			}
		}
	})
	const recall = 6 * time.Second
	s.App().Env.Dataset.Recall = recall
	start := time.Now()
	index := func() []dataset.Line {
		t.Helper()
		var lines []dataset.Line
		if err := dataset.ReadIndex(filepath.Join(dir, dataset.IndexName), func(e dataset.IndexEntry) error {
			if e.Err != nil {
				return e.Err
			}
			lines = append(lines, e.Line)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return lines
	}
	last := func(origin string) dataset.Line {
		t.Helper()
		lines := index()
		if len(lines) == 0 || lines[len(lines)-1].Origin != origin {
			t.Fatalf("the last index line is not a %s shot: %+v", origin, lines)
		}
		return lines[len(lines)-1]
	}
	sidecars := func(l dataset.Line) (*dataset.Dump, []dataset.Word) {
		t.Helper()
		var dump *dataset.Dump
		if l.ATSPI != "" {
			b, err := os.ReadFile(filepath.Join(dir, l.ATSPI))
			if err != nil {
				t.Fatal(err)
			}
			if dump, err = dataset.ParseDump(b); err != nil {
				t.Fatal(err)
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, l.OCR))
		if err != nil {
			t.Fatalf("shot %s has no OCR words: %v", l.Shot, err)
		}
		words, err := dataset.ParseOCR(b)
		if err != nil {
			t.Fatal(err)
		}
		return dump, words
	}
	timed := func(what string, since time.Time) { t.Logf("capture: %s in %.1f s", what, time.Since(since).Seconds()) }

	// The scenario: a form launched in Russian and dark, its first shot.
	at := time.Now()
	out := mustOK(t, cs, "vm_dataset_app", map[string]any{"vmid": vmid, "app": "poligon-form", "command": "poligon-form --title dataset-form",
		"window": "dataset-form", "locale": "ru_RU.UTF-8", "theme": "dark", "intent": "the form's first screen", "shots": "1"})
	timed("vm_dataset_app", at)
	if !strings.Contains(out, `window "dataset-form" at`) {
		t.Fatalf("vm_dataset_app = %q", out)
	}
	l := last("vm_dataset_app:screen.shot")
	if l.App != "poligon-form" || l.Locale != "ru" || l.LocaleRaw != "ru_RU.UTF-8" || l.Theme != "dark" || l.Intent != "the form's first screen" {
		t.Errorf("the scenario's labels: app %q locale %q/%q theme %q intent %q", l.App, l.Locale, l.LocaleRaw, l.Theme, l.Intent)
	}
	if l.Mode == "" || l.ScreenType != "x11" || l.CoordSpace != "physical" {
		t.Errorf("mode %q, screen_type %q, coord_space %q", l.Mode, l.ScreenType, l.CoordSpace)
	}
	dump, _ := sidecars(l)
	if dump == nil || !hasWidget(dump, "frame", "dataset-form") {
		t.Fatalf("the scenario's shot has no AT-SPI frame of the form: %+v (atspi_error %q)", dump, l.ATSPIError)
	}
	t.Logf("capture: mode %s, frame %dx%d, guest %dx%d, %d widgets", l.Mode, l.FrameW, l.FrameH, l.GuestW, l.GuestH, l.ATSPIWidgets)

	// A known button: its label by OCR, clicked with an intent.
	win := mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "window": "dataset-form", "timeout": 30})
	m := windowAt.FindStringSubmatch(win)
	if m == nil {
		t.Fatalf("ui_wait_for dataset-form = %q", win)
	}
	form := image.Rect(atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[1])+atoi(t, m[3]), atoi(t, m[2])+atoi(t, m[4]))
	mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 30})
	rows, _ := readRows(t, mustOK(t, cs, "ui_read", map[string]any{"vmid": vmid}))
	clear, ok := image.Point{}, false
	for label, p := range rows {
		if label == "Clear" && p.In(form) {
			clear, ok = p, true
		}
	}
	if !ok {
		t.Fatalf("ui_read finds no Clear in the form at %v: %v", form, rows)
	}
	lines := len(index())
	mustRefuse(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": clear.X, "y": clear.Y}, "intent is required")
	if n := len(index()); n != lines || strings.Contains(shOK(t, cs, vmid, "cat /tmp/poligon-form.log"), `"button": "Clear"`) {
		t.Fatalf("a click without intent did something: %d index lines (were %d)", n, lines)
	}
	at = time.Now()
	mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": clear.X, "y": clear.Y, "intent": "press Clear"})
	timed("ui_click", at)
	if got := waitLog(t, cs, vmid, `"button": "Clear"`); got["button"] != "Clear" {
		t.Fatalf("the form saw %v", got)
	}
	l = last("ui_click")
	if l.Click == nil || *l.Click != [2]int{clear.X, clear.Y} || l.ClickSource != "xy" || l.Intent != "press Clear" || l.ScreenChanged == nil || *l.ScreenChanged {
		t.Fatalf("the click's line: %+v", l)
	}
	dump, words := sidecars(l)
	if dump == nil {
		t.Fatalf("the click has no AT-SPI dump: %s", l.ATSPIError)
	}
	var button *dataset.Widget
	for i, w := range dump.Widgets {
		if w.Role == "push button" && w.Name == "Clear" && clear.In(image.Rect(w.X, w.Y, w.X+w.W, w.Y+w.H)) {
			button = &dump.Widgets[i]
		}
	}
	if button == nil {
		t.Fatalf("no AT-SPI push button Clear holds the click %v: %+v", clear, dump.Widgets)
	}
	read := false
	for _, w := range words {
		if w.Text == "Clear" && w.Box.Overlaps(image.Rect(button.X, button.Y, button.X+button.W, button.Y+button.H)) {
			read = true
		}
	}
	if !read {
		t.Fatalf("the OCR words have no Clear on the button at %+v: %v", button, words)
	}

	// A window moving while the frame is dumped: screen_changed.
	shOK(t, cs, vmid, `export DISPLAY=:0 XAUTHORITY=/home/test/.Xauthority; (i=0; while [ $i -lt 100 ]; do `+
		`xdotool search --name dataset-form windowmove 60 80; sleep 0.1; xdotool search --name dataset-form windowmove 400 260; sleep 0.1; i=$((i+1)); done) >/dev/null 2>&1 & echo $! > /tmp/mover.pid`)
	mustOK(t, cs, "ui_screenshot", map[string]any{"vmid": vmid, "intent": "a form on the move"})
	shOK(t, cs, vmid, "kill $(cat /tmp/mover.pid)")
	if l = last("ui_screenshot"); l.ScreenChanged == nil || !*l.ScreenChanged {
		t.Errorf("a window moving during the dump: screen_changed %v", l.ScreenChanged)
	}

	// No python3, then (once the recall passed) no pyatspi, remembered;
	// after the recall the dump comes back.
	py := "/usr/bin/python3"
	shOK(t, cs, vmid, fmt.Sprintf("mv %s %s.hidden", py, py))
	l = screenshotLine(t, cs, vmid, nil, last, sidecars)
	shOK(t, cs, vmid, fmt.Sprintf("mv %s.hidden %s", py, py))
	if l.ATSPI != "" || !strings.Contains(l.ATSPIError, "no python3") {
		t.Errorf("without python3: atspi %q, atspi_error %q", l.ATSPI, l.ATSPIError)
	}
	time.Sleep(recall)
	pyatspi := "$(python3 -c 'import os, pyatspi; print(os.path.dirname(pyatspi.__file__))')"
	shOK(t, cs, vmid, "d="+pyatspi+"; mv $d /root/pyatspi.hidden && echo $d > /root/pyatspi.where")
	l = screenshotLine(t, cs, vmid, nil, last, sidecars)
	asked := time.Now() // the guest was remembered before this
	if l.ATSPI != "" || !strings.Contains(l.ATSPIError, "no pyatspi") {
		t.Errorf("without pyatspi: atspi %q, atspi_error %q", l.ATSPI, l.ATSPIError)
	}
	if l = screenshotLine(t, cs, vmid, nil, last, sidecars); l.ATSPI != "" || !strings.Contains(l.ATSPIError, "remembered") {
		t.Errorf("within the recall the guest is not asked again: atspi %q, atspi_error %q", l.ATSPI, l.ATSPIError)
	}
	shOK(t, cs, vmid, "mv /root/pyatspi.hidden $(cat /root/pyatspi.where)")
	time.Sleep(recall - time.Since(asked))
	if l = screenshotLine(t, cs, vmid, nil, last, sidecars); l.ATSPI == "" || l.ATSPIWidgets == 0 {
		t.Errorf("after the recall the dump is back: atspi_error %q", l.ATSPIError)
	}
	// No session of the user asked for.
	if l = screenshotLine(t, cs, vmid, map[string]any{"user": "nobody"}, last, sidecars); l.ATSPI != "" || !strings.Contains(l.ATSPIError, "no desktop session of nobody") {
		t.Errorf("no session: atspi %q, atspi_error %q", l.ATSPI, l.ATSPIError)
	}
	st := s.App().Env.Dataset.Writer.Counters.Snapshot()
	t.Logf("capture: %d shots in %.1f s; counters %+v", len(index()), time.Since(start).Seconds(), st)
}

// screenshotLine takes a captured ui_screenshot (with args) and answers its
// index line, which must have OCR words.
func screenshotLine(t *testing.T, cs *mcp.ClientSession, vmid int, args map[string]any, last func(string) dataset.Line,
	sidecars func(dataset.Line) (*dataset.Dump, []dataset.Word)) dataset.Line {
	t.Helper()
	a := map[string]any{"vmid": vmid, "intent": "a look"}
	for k, v := range args {
		a[k] = v
	}
	at := time.Now()
	_, res := call(t, cs, "ui_screenshot", a)
	if res.IsError || len(res.Content) != 2 {
		t.Fatalf("ui_screenshot: %q", resultText(res))
	}
	l := last("ui_screenshot")
	if _, words := sidecars(l); len(words) == 0 {
		t.Fatalf("a shot without OCR words: %+v", l)
	}
	t.Logf("capture: ui_screenshot in %.1f s (atspi_error %q)", time.Since(at).Seconds(), l.ATSPIError)
	return l
}

// hasWidget says whether the dump shows a widget of role named name.
func hasWidget(d *dataset.Dump, role, name string) bool {
	for _, w := range d.Widgets {
		if w.Role == role && w.Name == name {
			return true
		}
	}
	return false
}
