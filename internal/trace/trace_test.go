package trace

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/poligon/poligon/internal/store"
)

// dig names a frame as the tests' recorders do.
func dig(m *image.RGBA) string { return fmt.Sprintf("%x", xxhash.Sum64(m.Pix)) }

func openRecorder(t *testing.T, o Options) (*Recorder, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if o.Digest == nil {
		o.Digest = dig
	}
	r, err := Open(st, filepath.Join(dir, "trace"), o)
	if err != nil {
		t.Fatal(err)
	}
	return r, st
}

// screen is a 64x40 frame of one colour with a bar at y.
func screen(c uint8, bar int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, 64, 40))
	for i := range m.Pix {
		m.Pix[i] = c
	}
	for x := 10; x < 30; x++ {
		m.Set(x, bar, color.RGBA{255, 0, 0, 255})
	}
	return m
}

// Steps are stored off the call's path and read back in order, with their
// frames; one frame shown by two steps is kept once.
func TestRecordAndRead(t *testing.T) {
	r, st := openRecorder(t, Options{})
	a, b := screen(20, 5), screen(20, 30)
	at := time.Unix(1_800_000_000, 0).UTC()
	r.Record(Step{At: at, Owner: "alice", Bench: "local", VMID: 101, Source: SourceMCP, Call: "ui_click", Outcome: "ok",
		Args: json.RawMessage(`{"x":20,"y":30}`)}, a, b)
	r.Record(Step{At: at.Add(time.Second), Owner: "alice", Bench: "local", VMID: 101, Source: SourceMCP, Call: "ui_key", Outcome: "error", Error: "boom"}, b, nil)
	r.Record(Step{At: at.Add(2 * time.Second), Owner: "bob", Bench: "local", VMID: 102, Source: SourceMCP, Call: "vm_exec", Outcome: "ok"}, nil, nil)
	r.Close()
	steps, err := r.Steps(context.Background(), Query{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Call != "ui_click" || steps[0].Before != dig(a) || steps[0].After != dig(b) || steps[1].Before != dig(b) || steps[1].Error != "boom" {
		t.Fatalf("alice's steps: %+v", steps)
	}
	// A lease holder's view: their own steps, and others' from the lease on.
	if held, _ := r.Steps(context.Background(), Query{Owner: "bob", OthersSince: at.Add(time.Second)}); len(held) != 2 || held[0].Call != "ui_key" || held[1].Owner != "bob" {
		t.Fatalf("bob's steps with the lease since the second: %+v", held)
	}
	if !steps[0].At.Equal(at) || string(steps[0].Args) != `{"x":20,"y":30}` {
		t.Fatalf("step 1 read back as %+v", steps[0])
	}
	if png, err := r.Frame(dig(b)); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("frame b: %v", err)
	}
	if _, err := r.Frame("../etc"); err == nil {
		t.Fatal("a path read as a frame")
	}
	u, _ := st.TraceUsage(context.Background())
	if u.Steps != 3 || u.Frames != 2 {
		t.Fatalf("usage %+v, want 3 steps and 2 frames", u)
	}
	if s := r.Stats(); s.Recorded != 3 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// The bound: steps past the age go, then the oldest until the rest fits,
// and a frame no step names any more goes with its file.
func TestPruneKeepsTheBound(t *testing.T) {
	r, st := openRecorder(t, Options{MaxAge: time.Hour, MaxBytes: 1 << 20})
	old := time.Now().Add(-2 * time.Hour)
	oldFrame := screen(1, 1)
	r.Record(Step{At: old, Owner: "a", Call: "old"}, oldFrame, nil)
	for i := range 50 {
		r.Record(Step{At: time.Now(), Owner: "a", Call: "new", Text: strings.Repeat("x", 40_000)}, screen(2, i%40), nil)
	}
	r.Close()
	r.prune()
	u, _ := st.TraceUsage(context.Background())
	if u.StepBytes+u.FrameBytes > 1<<20 {
		t.Fatalf("after pruning the trace holds %d bytes, bound 1 MiB", u.StepBytes+u.FrameBytes)
	}
	steps, _ := r.Steps(context.Background(), Query{})
	for _, s := range steps {
		if s.Call == "old" {
			t.Fatal("a step past max_age survived")
		}
	}
	if len(steps) == 0 || len(steps) == 50 {
		t.Fatalf("%d of 50 new steps kept: the bound should drop the oldest, not all", len(steps))
	}
	if _, err := os.Stat(r.framePath(dig(oldFrame))); !os.IsNotExist(err) {
		t.Fatal("the old step's frame file stayed")
	}
	if r.Stats().Pruned == 0 {
		t.Fatal("no pruned steps counted")
	}
}

// A full queue drops the step and counts it; the call never waits.
func TestRecordNeverWaits(t *testing.T) {
	r, _ := openRecorder(t, Options{Queue: 1})
	start := time.Now()
	for range 2000 {
		r.Record(Step{At: time.Now(), Owner: "a", Call: "x"}, nil, nil)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Record waited for the writer")
	}
	r.Close()
	s := r.Stats()
	if s.Recorded+s.Dropped != 2000 {
		t.Fatalf("recorded %d + dropped %d != 2000", s.Recorded, s.Dropped)
	}
}

// The page has every step, the failure marked, each frame inline once and
// the changed area; the zip has the same steps as JSON and the frames.
func TestExport(t *testing.T) {
	r, _ := openRecorder(t, Options{})
	a, b := screen(20, 5), screen(20, 30)
	at := time.Now()
	r.Record(Step{At: at, Owner: "alice", VMID: 101, Source: SourceMCP, Call: "ui_click", Outcome: "ok", Args: json.RawMessage(`{"x":20}`)}, a, b)
	r.Record(Step{At: at.Add(time.Second), Owner: "alice", VMID: 101, Source: SourceScript, Call: "keyboard.type", Outcome: "error",
		Error: "vmid 101 is busy", Text: "x\ty\tlabel\n1\t2\tOK"}, b, b)
	r.Close()
	steps, _ := r.Steps(context.Background(), Query{})
	e := Export{Title: "vmid 101", Steps: steps, Frame: r.Frame}
	var page bytes.Buffer
	if err := e.HTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{"ui_click", "keyboard.type", `class="step failed"`, "first-failure", "vmid 101 is busy", "data:image/png;base64,", `class="changed"`, "changed 20x26 at 10,5"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(html, "data:image/png;base64,"); n != 2 {
		t.Errorf("%d frames inline, want 2 (each once)", n)
	}
	if strings.Contains(html, "http://") || strings.Contains(html, "https://") || strings.Contains(html, "src=\"/") {
		t.Error("the page names something to fetch")
	}
	var zipped bytes.Buffer
	if err := e.Zip(&zipped); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(zipped.Bytes()), int64(zipped.Len()))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range zr.File {
		names[f.Name] = true
		if f.Name == "steps.json" {
			rc, _ := f.Open()
			raw, _ := io.ReadAll(rc)
			var list []map[string]any
			if err := json.Unmarshal(raw, &list); err != nil || len(list) != 2 || list[0]["AfterFile"] != "frames/"+dig(b)+".png" {
				t.Errorf("steps.json: %v %s", err, raw)
			}
		}
	}
	for _, want := range []string{"steps.json", "index.html", "frames/" + dig(a) + ".png", "frames/" + dig(b) + ".png"} {
		if !names[want] {
			t.Errorf("the zip lacks %s (has %v)", want, names)
		}
	}
}

func TestScope(t *testing.T) {
	ctx := WithScope(context.Background(), Scope{Session: "s1", Source: SourceMCP})
	ctx = WithScope(ctx, Scope{Stand: "web"})
	if s := ScopeOf(ctx); s.Session != "s1" || s.Stand != "web" || s.Source != SourceMCP {
		t.Fatalf("scope %+v", s)
	}
	if FileName("vm 101/x", time.Unix(0, 0), "html") != "trace-vm-101-x-19700101-000000.html" {
		t.Fatal(FileName("vm 101/x", time.Unix(0, 0), "html"))
	}
}

// BenchmarkRecord is Record's cost on a call's path: a step with two
// 1280x800 frames handed over (named, encoded and stored by the writer).
func BenchmarkRecord(b *testing.B) {
	dir := b.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	r, err := Open(st, filepath.Join(dir, "trace"), Options{Digest: dig, Queue: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	before, after := image.NewRGBA(image.Rect(0, 0, 1280, 800)), image.NewRGBA(image.Rect(0, 0, 1280, 800))
	for b.Loop() {
		r.Record(Step{At: time.Now(), Owner: "a", Call: "ui_key", Source: SourceMCP}, before, after)
	}
	b.StopTimer()
	r.Close()
}
