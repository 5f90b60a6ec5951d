package vision

import (
	"bufio"
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends/vision/visiontest"
)

func readEvents(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %s", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// failures drives one failure of each category through a vision and a
// grounding client; every answer holds the word ZEBRA, which must reach the
// event file only with samples.
func failures(t *testing.T, ev *Events) *visiontest.Server {
	srv := newServer(t)
	frame, _ := uiFrame(640, 400)
	vis := testClient(t, srv, Endpoint{Resize: ResizeQwen25}, Options{Events: ev})
	gr := testClient(t, srv, Endpoint{Purpose: PurposeGrounding, Coords: CoordsPermille}, Options{Events: ev})
	srv.Reply(
		visiontest.Reply{Status: 500, Body: "ZEBRA upstream failure"},
		visiontest.Reply{Content: "10\t10\tbutton\tZEBRA\n20\t20\tbut", Finish: "length", Reasoning: "ZEBRA thoughts"},
		visiontest.Reply{Content: "ZEBRA prose"},
		visiontest.Reply{Content: "ZEBRA is nowhere"},
		visiontest.Reply{Drop: true},
	)
	vis.Elements(WithRequest(t.Context(), "req-1"), frame)
	vis.Elements(t.Context(), frame)
	vis.Elements(t.Context(), frame)
	gr.Ground(t.Context(), frame, "ZEBRA button", "button")
	gr.Ground(t.Context(), frame, "Save", "")
	return srv
}

func TestEvents(t *testing.T) {
	dir := t.TempDir()
	ev, err := OpenEvents(dir, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := failures(t, ev)
	ev.Close()
	if ev.Recorded() != 5 {
		t.Fatalf("%d events recorded, want 5", ev.Recorded())
	}
	raw, _ := os.ReadFile(filepath.Join(dir, eventsFile))
	for _, bad := range []string{"ZEBRA", "127.0.0.1", portOf(srv.URL), testKey, "iVBOR", "error_head", "sample"} {
		if bytes.Contains(raw, []byte(bad)) {
			t.Errorf("the event file holds %q without samples:\n%s", bad, raw)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "samples")); err == nil {
		t.Error("a samples directory without samples")
	}
	evs := readEvents(t, filepath.Join(dir, eventsFile))
	want := []struct {
		kind, category, errorKind string
	}{
		{"vision", "http_error", "status"}, {"vision", "capped", ""}, {"vision", "unparseable", ""},
		{"grounding", "no_point", "no_point"}, {"grounding", "transport", "reset"},
	}
	ids := map[string]bool{}
	for i, e := range evs {
		w := want[i]
		ek, _ := e["error_kind"].(string)
		if e["kind"] != w.kind || e["category"] != w.category || ek != w.errorKind || e["model"] != "holo2-4b" {
			t.Errorf("event %d: %v, want %+v", i, e, w)
		}
		for _, f := range []string{"ts", "id", "status", "ms", "prompt_tokens", "completion_tokens", "usage", "frame_w", "frame_h", "sent_w", "sent_h", "answer_chars", "body_chars", "label_chars", "reason_chars"} {
			if _, ok := e[f]; !ok {
				t.Errorf("event %d lacks %s: %v", i, f, e)
			}
		}
		ids[e["id"].(string)] = true
	}
	if len(ids) != 5 {
		t.Errorf("ids are not unique: %v", ids)
	}
	if e := evs[0]; e["req"] != "req-1" || e["status"] != 500.0 || e["body_chars"] != float64(len("ZEBRA upstream failure")) || e["sent_w"] != 644.0 || e["frame_w"] != 640.0 {
		t.Errorf("the http_error event: %v", e)
	}
	if e := evs[1]; e["finish"] != "length" || e["answer_chars"] != float64(len("10\t10\tbutton\tZEBRA\n20\t20\tbut")) || e["reason_chars"] != float64(len("ZEBRA thoughts")) {
		t.Errorf("the capped event: %v", e)
	}
	if e := evs[3]; e["label_chars"] != float64(len("ZEBRA button")) {
		t.Errorf("the no_point event: %v", e)
	}
}

func TestEventSamples(t *testing.T) {
	dir := t.TempDir()
	ev, err := OpenEvents(dir, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	failures(t, ev)
	ev.Close()
	evs := readEvents(t, filepath.Join(dir, eventsFile))
	if len(evs) != 5 {
		t.Fatalf("%d events", len(evs))
	}
	if h, _ := evs[0]["error_head"].(string); !strings.Contains(h, "ZEBRA upstream failure") {
		t.Errorf("error_head %q", h)
	}
	if l, _ := evs[3]["label"].(string); l != "ZEBRA button" {
		t.Errorf("label %q", l)
	}
	if r, _ := evs[1]["reason"].(string); r != "ZEBRA thoughts" {
		t.Errorf("reason %q", r)
	}
	if e, _ := evs[4]["error"].(string); !strings.Contains(e, "reset") {
		t.Errorf("transport error chain %q", e)
	}
	for i, e := range evs {
		p, _ := e["sample_png"].(string)
		j, _ := e["sample_json"].(string)
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || img.Bounds().Dx() != 640 || img.Bounds().Dy() != 400 {
			t.Errorf("event %d: sample %s is not the 640x400 frame: %v", i, p, err)
		}
		var s sample
		b, err = os.ReadFile(filepath.Join(dir, j))
		if err != nil || json.Unmarshal(b, &s) != nil || s.ID != e["id"] {
			t.Fatalf("event %d: sample %s: %v %s", i, j, err, b)
		}
		if i == 1 && (s.Content != "10\t10\tbutton\tZEBRA\n20\t20\tbut" || s.Reasoning != "ZEBRA thoughts" || s.Finish != "length") {
			t.Errorf("the capped sample: %+v", s)
		}
	}
}

func TestEventsRotate(t *testing.T) {
	dir := t.TempDir()
	ev, err := OpenEvents(dir, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	ev.max = 1000 // bytes, so a few events roll it over
	for i := 0; i < 20; i++ {
		if err := ev.write(&event{Kind: "vision", Category: "capped", Model: strings.Repeat("m", 100)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	cur, _ := os.Stat(filepath.Join(dir, eventsFile))
	old, err := os.Stat(filepath.Join(dir, eventsFile+".1"))
	if err != nil || cur.Size() > 1000 || old.Size() > 1000 || old.Size() < 500 {
		t.Errorf("after rotation: current %d bytes, .1 %v %v", cur.Size(), old, err)
	}
	if ev.Recorded() != 20 {
		t.Errorf("recorded %d", ev.Recorded())
	}
	// Reopening appends to what is there.
	ev.Close()
	ev2, err := OpenEvents(dir, false, 1)
	if err != nil || ev2.size != cur.Size() {
		t.Errorf("reopened at %d, want %d: %v", ev2.size, cur.Size(), err)
	}
	ev2.Close()
	if err := ev2.write(&event{}, nil); err == nil {
		t.Error("a write after Close succeeded")
	}
	var nilEvents *Events
	if nilEvents.Recorded() != 0 || nilEvents.Close() != nil {
		t.Error("a nil *Events is not a no-op")
	}
}

// An unwritable events directory never fails a call.
func TestEventsBestEffort(t *testing.T) {
	dir := t.TempDir()
	ev, err := OpenEvents(dir, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	ev.Close() // every write now fails
	srv := newServer(t)
	var logs logBuffer
	cl := testClient(t, srv, Endpoint{}, Options{Events: ev, Log: logs.logger(), CappedDir: "/proc/no-such-dir"})
	frame, _ := uiFrame(320, 200)
	srv.Reply(visiontest.Reply{Content: "1\t1\tbutton\tA\n1\t2\tbu", Finish: "length"})
	l, err := cl.Elements(t.Context(), frame)
	if err != nil || l.Problem != CategoryCapped || len(l.Elements) != 1 {
		t.Fatalf("%+v %v", l, err)
	}
	if log := logs.String(); !strings.Contains(log, `msg="model event not recorded"`) || !strings.Contains(log, `msg="capped frame not saved"`) {
		t.Errorf("log:\n%s", log)
	}
}

func TestCappedFrames(t *testing.T) {
	srv := newServer(t)
	capped := filepath.Join(t.TempDir(), "vision-capped")
	cl := testClient(t, srv, Endpoint{Resize: ResizeQwen25}, Options{CappedDir: capped})
	frame, _ := uiFrame(640, 400)
	partial := strings.Repeat("10\t10\tbutton\tOK\n", 30) + "10\t1"
	srv.Reply(visiontest.Reply{Content: "1\t1\tbutton\tA\n"}, visiontest.Reply{Content: partial, Finish: "length"})
	cl.Elements(t.Context(), frame)
	cl.Elements(t.Context(), frame)
	pngs, _ := filepath.Glob(filepath.Join(capped, "*.png"))
	txts, _ := filepath.Glob(filepath.Join(capped, "*.txt"))
	if len(pngs) != 1 || len(txts) != 1 || strings.TrimSuffix(pngs[0], ".png") != strings.TrimSuffix(txts[0], ".txt") {
		t.Fatalf("capped files: %v %v", pngs, txts)
	}
	b, _ := os.ReadFile(pngs[0])
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != 640 {
		t.Errorf("the capped frame is not the 640x400 frame: %v", err)
	}
	if b, _ := os.ReadFile(txts[0]); string(b) != partial {
		t.Errorf("the partial answer: %q", b)
	}
}
