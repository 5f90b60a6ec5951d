package engine

import (
	"encoding/json"
	"image"
	"image/color"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/dataset"
)

// The training dataset through the MCP door, on the in-memory backend (the
// guest's dump script answers as a guest would; the real one runs in the
// debian-desktop test): the labels are listed only while capturing, the
// intent rule refuses changing nothing, the tools and a script capture
// their shots, dataset_status and /metrics say so, and below the
// free-space floor nothing is taken while the tools still answer.

// datasetServer serves VM 101 of the in-memory backend, capturing into dir
// ("" = no capture) with the floor minFreeMB.
func datasetServer(t *testing.T, dir string, minFreeMB int) (*Server, *backendtest.Backend) {
	t.Helper()
	be := backendtest.New("")
	be.AddVM(backends.VM{VMID: 101, Name: "tester-repro-d", Status: "running"})
	frame := image.NewRGBA(image.Rect(0, 0, 640, 400))
	for i := range frame.Pix {
		frame.Pix[i] = 0xff
	}
	for x := 100; x < 200; x++ { // something to see
		frame.Set(x, 100, color.Black)
	}
	be.Screen(101).SetFrame(frame)
	be.SetExec(func(vmid int, req backends.ExecRequest) backends.ExecStatus {
		switch req.Args[2] {
		case "poligon-atspi":
			return backends.ExecStatus{Exited: true, Stdout: []byte("boot b1\n" +
				`{"screen":[640,400],"locale":"en_US.UTF-8","desktop":"XFCE","session_type":"x11","focused":null,"truncated":false,` +
				`"widgets":[{"app":"form","role":"push button","name":"Apply","x":90,"y":90,"w":120,"h":20,"states":["showing"],"depth":3}],"app":"form","theme":"light"}`)}
		case "poligon-xrandr":
			return backends.ExecStatus{Exited: true, Stdout: []byte("boot b1\nmode ok\n")}
		}
		return backends.ExecStatus{Exited: true}
	})
	cfg := testConfig(t, t.TempDir())
	cfg.Dataset = config.Dataset{Dir: dir, XRandR: "1280x800", MinFreeMB: minFreeMB}
	cfg.ScriptsDir = t.TempDir()
	os.WriteFile(filepath.Join(cfg.ScriptsDir, "look.js"), []byte(`module.exports = {
  name: "look", description: "a shot and a click", params: { app: { default: "" }, intent: { default: "" } },
  run(vm) { vm.screen.shot(); vm.mouse.click(150, 100); return "ok"; } };`), 0o644)
	s := testServer(t, fullSurface(cfg), app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) { return fakeBench{be}, nil }})
	return s, be
}

func schemaProps(t *testing.T, s *Server, tool string) []string {
	t.Helper()
	tl, ok := s.Tool(tool)
	if !ok {
		t.Fatalf("no tool %s", tool)
	}
	var sc struct{ Properties map[string]any }
	json.Unmarshal(tl.Schema, &sc)
	var names []string
	for n := range sc.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestDatasetOff(t *testing.T) {
	s, be := datasetServer(t, "", 0)
	cs := connect(t, s)
	if p := schemaProps(t, s, "ui_click"); slices.Contains(p, "intent") || slices.Contains(p, "app") {
		t.Errorf("a server that does not capture lists the dataset's labels: %v", p)
	}
	// Accepted and ignored: an agent may always send them.
	mustOK(t, cs, "ui_click", map[string]any{"vmid": 101, "x": 150, "y": 100, "intent": "press", "theme": "dark"})
	mustOK(t, cs, "ui_click", map[string]any{"vmid": 101, "x": 150, "y": 100})
	if be.Count("ExecStart") != 0 {
		t.Errorf("the guest was asked for a dump without capture: %v", be.Calls())
	}
	if out := mustOK(t, cs, "dataset_status", nil); !strings.Contains(out, `"enabled": false`) || !strings.Contains(out, "POLIGON_MCP_DATASET") {
		t.Errorf("dataset_status without capture = %s", out)
	}
}

func TestDatasetCapture(t *testing.T) {
	dir := t.TempDir()
	s, be := datasetServer(t, dir, 1)
	cs := connect(t, s)
	if p := schemaProps(t, s, "ui_click"); !slices.Contains(p, "intent") || !slices.Contains(p, "locale") || !slices.Contains(p, "user") {
		t.Errorf("a capturing server does not list the dataset's labels: %v", p)
	}
	// No intent: refused, nothing done, nothing captured.
	for _, tool := range []string{"ui_click", "ui_drag", "ui_type", "ui_click_label"} {
		args := map[string]any{"vmid": 101, "x": 150, "y": 100, "x1": 1, "y1": 1, "x2": 5, "y2": 5, "text": "a", "label": "Apply"}
		for k := range args {
			if tl, _ := s.Tool(tool); !slices.ContainsFunc(tl.params, func(p param) bool { return p.name == k }) {
				delete(args, k)
			}
		}
		mustRefuse(t, cs, tool, args, "intent is required while the training dataset is captured")
	}
	if n := be.Count("Click") + be.Count("Drag") + be.Count("Type") + be.Count("ExecStart"); n != 0 {
		t.Fatalf("a refused action reached the backend: %v", be.Calls())
	}
	mustOK(t, cs, "ui_click", map[string]any{"vmid": 101, "x": 150, "y": 100, "intent": "press Apply", "theme": "dark", "screenshot": true, "settle_ms": 0})
	mustOK(t, cs, "ui_screenshot", map[string]any{"vmid": 101, "scale": 0.5})
	mustOK(t, cs, "vm_look", map[string]any{"vmid": 101, "app": "form", "intent": "look at the form"})
	var lines []dataset.Line
	dataset.ReadIndex(filepath.Join(dir, dataset.IndexName), func(e dataset.IndexEntry) error {
		lines = append(lines, e.Line)
		return nil
	})
	var origins []string
	for _, l := range lines {
		origins = append(origins, l.Origin)
	}
	if want := []string{"ui_click", "after_ui_click", "ui_screenshot", "vm_look:screen.shot", "vm_look:mouse.click"}; !slices.Equal(origins, want) {
		t.Fatalf("origins %v, want %v", origins, want)
	}
	click := lines[0]
	if click.Click == nil || *click.Click != [2]int{150, 100} || click.Intent != "press Apply" || click.Theme != "dark" || click.App != "form" ||
		click.ATSPIWidgets != 1 || click.Mode != "ok" || click.Bench != "local" || click.FrameW != 640 {
		t.Errorf("the click's line: %+v", click)
	}
	if shot := lines[2]; shot.FrameW != 640 || shot.Intent != "" || shot.Click != nil {
		t.Errorf("a scaled screenshot is captured full-size: %+v", shot)
	}
	if l := lines[4]; l.App != "form" || l.Intent != "look at the form" || l.ClickSource != "xy" || l.Click == nil {
		t.Errorf("a script's click carries its params: %+v", l)
	}
	out := mustOK(t, cs, "dataset_status", nil)
	var st dataset.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("dataset_status = %s: %v", out, err)
	}
	if !st.Enabled || st.Counters.Shots != 5 || st.Index.Shots != 5 || st.Index.Clicks != 2 || st.Index.ClicksWithIntent != 2 || st.Index.ByOrigin["ui_click"] != 1 {
		t.Errorf("dataset_status = %s", out)
	}
	rec := httptest.NewRecorder()
	s.metrics.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body := rec.Body.String(); !strings.Contains(body, `poligon_dataset_counters_total{counter="shots"} 5`) ||
		!strings.Contains(body, `poligon_dataset_counters_total{counter="clicks"} 2`) {
		t.Errorf("/metrics has no dataset.counters:\n%s", body)
	}
}

func TestDatasetFullDisk(t *testing.T) {
	dir := t.TempDir()
	free, err := dataset.FreeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, be := datasetServer(t, dir, int(free>>20)+100_000) // a floor above what the volume has
	cs := connect(t, s)
	_, res := call(t, cs, "ui_screenshot", map[string]any{"vmid": 101})
	if res.IsError || len(res.Content) != 2 {
		t.Fatalf("ui_screenshot below the floor = %q", resultText(res))
	}
	mustOK(t, cs, "ui_click", map[string]any{"vmid": 101, "x": 150, "y": 100, "intent": "press Apply"})
	if be.Count("Click") != 1 || be.Count("ExecStart") != 0 {
		t.Errorf("below the floor the click must go and the guest not be asked: %v", be.Calls())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("written below the floor: %v", entries)
	}
	out := mustOK(t, cs, "dataset_status", nil)
	var st dataset.Status
	json.Unmarshal([]byte(out), &st)
	if st.Counters.NoSpace != 2 || st.Counters.Shots != 0 || !strings.Contains(out, "capture is stopped") {
		t.Errorf("dataset_status below the floor = %s", out)
	}
}
