package hostapi_test

// The training-dataset capture's rules as hostapi owns them, on the
// in-memory backend with real OCR: what a shot writes, that a click's frame
// and dump are taken before the click and a refused click keeps nothing,
// that a guest without a dump is not asked again until the recall passes,
// the screen mode once per boot, the intent rule and the free-space floor.
// The guest's side (the dump script on a real desktop) is the engine's
// debian-desktop test.

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/dataset"
)

// guestScripts answers the capture's guest programs as a guest would: the
// dump script (atspi.sh) and the screen mode (xrandr.sh), each by the name
// it runs under ($0). It counts what ran.
type guestScripts struct {
	mu    sync.Mutex
	ran   []string
	boot  string
	dump  func() backends.ExecStatus // the dump's answer
	modes int
}

func (g *guestScripts) exec(vmid int, req backends.ExecRequest) backends.ExecStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	name := ""
	if len(req.Args) > 2 {
		name = req.Args[2]
	}
	g.ran = append(g.ran, name)
	switch name {
	case "poligon-atspi":
		st := g.dump()
		st.Stdout = append([]byte("boot "+g.boot+"\n"), st.Stdout...)
		return st
	case "poligon-xrandr":
		g.modes++
		return backends.ExecStatus{Exited: true, Stdout: []byte("boot " + g.boot + "\nmode ok-added\n")}
	}
	return backends.ExecStatus{Exited: true}
}

func (g *guestScripts) count(name string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, r := range g.ran {
		if r == name {
			n++
		}
	}
	return n
}

// aDump is a dump of the screens.png frame (1280x800): a window and a button.
func aDump() backends.ExecStatus {
	d := dataset.Dump{Screen: [2]int{1280, 800}, Locale: "ru_RU.UTF-8", Desktop: "XFCE", SessionType: "x11",
		Widgets: []dataset.Widget{
			{App: "xterm", Role: "frame", Name: "A", X: 0, Y: 0, W: 400, H: 200, States: []string{"active", "showing", "visible"}, Depth: 2},
			{App: "xterm", Role: "push button", Name: "OK", X: 100, Y: 100, W: 60, H: 24, States: []string{"showing", "visible"}, Depth: 3},
		}}
	b, _ := json.Marshal(struct {
		dataset.Dump
		App   string `json:"app"`
		Theme string `json:"theme"`
	}{d, "xterm", "dark"})
	return backends.ExecStatus{Exited: true, Stdout: b}
}

// capturing makes alice's VM 101 show screens.png, with OCR and a capture
// into a new directory.
func capturing(t *testing.T, minFreeMB int64) (*backendtest.Backend, *hostapi.VM, *hostapi.Dataset, *guestScripts, context.Context) {
	t.Helper()
	be, env, ctx := bench(t)
	env.MaxWait = time.Minute
	env.Eyes = &hostapi.Eyes{OCR: sharedReader(t)}
	w, err := dataset.NewWriter(t.TempDir(), minFreeMB)
	if err != nil {
		t.Fatal(err)
	}
	env.Dataset = &hostapi.Dataset{Writer: w, Mode: "1280x800", Recall: 4 * time.Second}
	g := &guestScripts{boot: "boot-1", dump: aDump}
	be.SetExec(g.exec)
	be.Screen(101).SetFrame(screens(t))
	c := alice(t, ctx, env, be).WithBench("lab")
	v, _ := lock(t, ctx, c, 101)
	return be, v, env.Dataset, g, ctx
}

// indexLines reads the capture's index.
func indexLines(t *testing.T, d *hostapi.Dataset) []dataset.Line {
	t.Helper()
	var lines []dataset.Line
	err := dataset.ReadIndex(filepath.Join(d.Writer.Dir(), dataset.IndexName), func(e dataset.IndexEntry) error {
		if e.Err != nil {
			return e.Err
		}
		lines = append(lines, e.Line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func TestCaptureAClick(t *testing.T) {
	be, v, d, g, ctx := capturing(t, 0)
	be.ResetCalls()
	n := hostapi.ShotNote{Origin: "ui_click", Intent: "press OK", Locale: "en", Click: &image.Point{X: 130, Y: 112}, ClickSource: "xy"}
	aimed := v.CaptureAim(ctx, nil, n)
	err := v.Click(ctx, 130, 112, "left", 1, "")
	aimed.Finish(ctx, err == nil)
	if err != nil {
		t.Fatal(err)
	}
	// The mode, then the dump, both before the click.
	calls := be.Calls()
	click := slices.Index(calls, "Click 101 130 112 left 1")
	lastExec := -1
	for i, c := range calls {
		if c == "ExecStart 101 /bin/sh" {
			lastExec = i
		}
	}
	if click < 0 || lastExec < 0 || lastExec > click {
		t.Fatalf("the dump does not come before the click: %v", calls)
	}
	if g.count("poligon-xrandr") != 1 || g.count("poligon-atspi") != 1 {
		t.Fatalf("guest programs: %v", g.ran)
	}
	lines := indexLines(t, d)
	if len(lines) != 1 {
		t.Fatalf("index: %+v", lines)
	}
	l := lines[0]
	want := fmt.Sprintf("%s-lab-vm101-alice-%s", dataset.BackendID("bench-a"), time.Now().Format("2006-01-02"))
	if l.Session != want || l.Shot != want+"/alice-shot-0001.png" || l.Agent != "alice" || l.Bench != "lab" || l.Node != backendtest.Node {
		t.Errorf("session, shot, agent, bench, node: %+v", l)
	}
	if l.Click == nil || *l.Click != [2]int{130, 112} || l.ClickSource != "xy" || l.Intent != "press OK" || l.Origin != "ui_click" {
		t.Errorf("the click: %+v", l)
	}
	// The caller's locale wins over the guest's; the probes fill the rest.
	if l.Locale != "en" || l.LocaleRaw != "en" || l.App != "xterm" || l.Theme != "dark" || l.Mode != "ok-added" {
		t.Errorf("labels: locale %q raw %q app %q theme %q mode %q", l.Locale, l.LocaleRaw, l.App, l.Theme, l.Mode)
	}
	if l.FrameW != 1280 || l.FrameH != 800 || l.GuestW != 1280 || l.Rescaled != nil || l.ATSPIWidgets != 2 || l.ATSPIError != "" || l.OCRError != "" ||
		l.ScreenChanged == nil || *l.ScreenChanged || l.CoordSpace != "physical" || l.Hard == nil || *l.Hard {
		t.Errorf("the shot's facts: %+v", l)
	}
	words, err := os.ReadFile(filepath.Join(d.Writer.Dir(), l.OCR))
	if err != nil || !strings.Contains(string(words), "\n") || len(strings.Split(string(words), "\n")) < 5 {
		t.Errorf("OCR words: %q %v", words, err)
	}
	if c := d.Writer.Counters.Snapshot(); c.Shots != 1 || c.Clicks != 1 || c.ATSPI != 1 || c.OCR != 1 || c.ClicksWithoutIntent != 0 {
		t.Errorf("counters: %+v", c)
	}

	// A refused click (off the screen) keeps nothing.
	aimed = v.CaptureAim(ctx, nil, hostapi.ShotNote{Origin: "ui_click", Intent: "miss", Click: &image.Point{X: 5000, Y: 5}})
	err = v.Click(ctx, 5000, 5, "left", 1, "")
	aimed.Finish(ctx, err == nil)
	if err == nil || len(indexLines(t, d)) != 1 {
		t.Fatalf("a refused click: err %v, index %d lines", err, len(indexLines(t, d)))
	}
	// The mode is set once per boot: a dump from a new boot sets it again
	// for the next shot.
	g.mu.Lock()
	g.boot = "boot-2"
	g.mu.Unlock()
	f, _ := v.Shot(ctx)
	v.CaptureShot(ctx, f, hostapi.ShotNote{Origin: "ui_screenshot"})
	v.CaptureShot(ctx, f, hostapi.ShotNote{Origin: "ui_screenshot"})
	if g.count("poligon-xrandr") != 2 {
		t.Errorf("the mode was set %d times over two boots, want 2: %v", g.count("poligon-xrandr"), g.ran)
	}
	lines = indexLines(t, d)
	if len(lines) != 3 || lines[1].Mode != "" || lines[2].Mode != "ok-added" {
		t.Errorf("modes over a reboot: %q %q", lines[1].Mode, lines[2].Mode)
	}
}

func TestCaptureRemembersAGuestWithoutADump(t *testing.T) {
	_, v, d, g, ctx := capturing(t, 0)
	g.dump = func() backends.ExecStatus {
		return backends.ExecStatus{Exited: true, ExitCode: 4, Stderr: []byte("no desktop session of test: none of their 3 processes has DISPLAY or WAYLAND_DISPLAY")}
	}
	f, _ := v.Shot(ctx)
	shot := func() dataset.Line {
		v.CaptureShot(ctx, f, hostapi.ShotNote{Origin: "ui_screenshot"})
		lines := indexLines(t, d)
		return lines[len(lines)-1]
	}
	l := shot()
	asked := time.Now() // the guest was remembered before this
	if l.ATSPI != "" || !strings.Contains(l.ATSPIError, "none of their 3 processes") || l.OCR == "" || l.Shot == "" {
		t.Fatalf("no session: the frame and OCR stay, atspi null with the reason: %+v", l)
	}
	// Asked once; within the recall not again, and the line says why.
	l = shot()
	if g.count("poligon-atspi") != 1 || !strings.Contains(l.ATSPIError, "remembered") {
		t.Fatalf("within the recall: %d dumps asked, error %q", g.count("poligon-atspi"), l.ATSPIError)
	}
	// After it, a login brings the dump back.
	time.Sleep(d.Recall - time.Since(asked))
	g.dump = aDump
	if l = shot(); l.ATSPI == "" || l.ATSPIWidgets != 2 || g.count("poligon-atspi") != 2 {
		t.Fatalf("after the recall: %+v, %d dumps asked", l, g.count("poligon-atspi"))
	}
	if c := d.Writer.Counters.Snapshot(); c.NoSession != 2 || c.ATSPIMissing != 2 || c.Shots != 3 {
		t.Errorf("counters: %+v", c)
	}
}

func TestCaptureIntentRule(t *testing.T) {
	_, v, _, _, _ := capturing(t, 0)
	err := v.Caller().RequireIntent(" ", "click")
	if err == nil || !strings.Contains(err.Error(), "intent is required") || hostapi.HintOf(err) == "" {
		t.Fatalf("a click without intent while capturing: %v", err)
	}
	if err := v.Caller().RequireIntent("press OK", "click"); err != nil {
		t.Fatal(err)
	}
	_, env, ctx := bench(t)
	be := backendtest.New("")
	be.AddVM(backends.VM{VMID: 101, Name: "alice-repro-mine", Pool: "alice", Status: "running"})
	if err := alice(t, ctx, env, be).RequireIntent("", "click"); err != nil {
		t.Fatalf("without capture no intent is needed: %v", err)
	}
}

func TestCaptureStopsBelowTheFloor(t *testing.T) {
	free, err := dataset.FreeBytes(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	be, v, d, g, ctx := capturing(t, int64(free>>20)+100_000)
	be.ResetCalls()
	f, _ := v.Shot(ctx)
	v.CaptureShot(ctx, f, hostapi.ShotNote{Origin: "ui_screenshot"})
	aimed := v.CaptureAim(ctx, nil, hostapi.ShotNote{Origin: "ui_click", Intent: "x", Click: &image.Point{X: 1, Y: 1}})
	if err := v.Click(ctx, 1, 1, "left", 1, ""); err != nil {
		t.Fatal(err)
	}
	aimed.Finish(ctx, true)
	if len(g.ran) != 0 {
		t.Errorf("below the floor the guest was asked: %v", g.ran)
	}
	if c := d.Writer.Counters.Snapshot(); c.NoSpace != 2 || c.Shots != 0 {
		t.Errorf("counters: %+v", c)
	}
	if _, err := os.Stat(filepath.Join(d.Writer.Dir(), dataset.IndexName)); !os.IsNotExist(err) {
		t.Errorf("an index was written below the floor: %v", err)
	}
}

// The ScriptNote labels a run's shots with its own params.
func TestScriptNote(t *testing.T) {
	n := hostapi.ScriptNote("vm_dataset_app", map[string]string{"app": "gedit", "locale": "ru_RU.UTF-8", "theme": "dark", "intent": "first look", "user": "ann", "other": "x"})
	if n.Origin != "vm_dataset_app" || n.App != "gedit" || n.Locale != "ru_RU.UTF-8" || n.Theme != "dark" || n.Intent != "first look" || n.User != "ann" {
		t.Fatalf("%+v", n)
	}
}
