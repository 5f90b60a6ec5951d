package dataset_test

import (
	"encoding/json"
	"errors"
	"image"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/dataset/datasettest"
)

var day = time.Date(2026, 9, 19, 10, 0, 0, 0, time.UTC)

// The fields the manual's index line has, plus mode, coord_space,
// screen_type and hard.
var indexFields = []string{"shot", "atspi", "ocr", "click", "click_source", "label", "intent", "drag", "app", "locale",
	"locale_raw", "theme", "session", "bench", "origin", "ts", "req", "vmid", "node", "agent", "frame_w", "frame_h",
	"guest_w", "guest_h", "rescaled", "screen_changed", "atspi_widgets", "atspi_error", "ocr_error", "mode",
	"coord_space", "screen_type", "hard"}

func readIndex(t *testing.T, dir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, dataset.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for _, raw := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("index line %q: %v", raw, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestWriterFilesAndIndexLine(t *testing.T) {
	dir := t.TempDir()
	w, err := dataset.NewWriter(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	scr := datasettest.Draw(1, 1280, 800)
	session := dataset.SessionName(dataset.BackendID("https://pve.example:8006"), "default", 130, "user", day)
	if !strings.HasSuffix(session, "-default-vm130-user-2026-09-19") || len(strings.Split(session, "-")[0]) != 8 {
		t.Fatalf("session name %q", session)
	}
	shot := dataset.Shot{Session: session, Agent: "user", PNG: datasettest.PNG(scr.Image),
		ATSPI: datasettest.DumpJSON(scr, "ru_RU.UTF-8"), OCR: scr.Words,
		Line: dataset.Line{Click: &[2]int{620, 412}, ClickSource: "ocr", Label: "Далее", Intent: "open the next installer page",
			App: "anaconda", Theme: "light", Bench: "default", Origin: "ui_click_label", Req: "6aae89-3", VMID: 130, Node: "pve1", Mode: "ok"}}
	l, err := w.Write(shot)
	if err != nil {
		t.Fatal(err)
	}
	if l.Shot != session+"/user-shot-0001.png" || l.ATSPI != session+"/user-shot-0001.atspi.json" || l.OCR != session+"/user-shot-0001.ocr.tsv" {
		t.Fatalf("paths: %+v", l)
	}
	for _, rel := range []string{l.Shot, l.ATSPI, l.OCR} {
		if _, err := os.Stat(filepath.Join(dir, rel)); err != nil {
			t.Fatal(err)
		}
	}
	got := readIndex(t, dir)
	if len(got) != 1 {
		t.Fatalf("%d index lines", len(got))
	}
	var keys []string
	for k := range got[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := slices.Sorted(slices.Values(indexFields))
	if !slices.Equal(keys, want) {
		t.Fatalf("index fields\n got %v\nwant %v", keys, want)
	}
	m := got[0]
	for k, v := range map[string]any{"locale": "ru", "locale_raw": "ru_RU.UTF-8", "frame_w": 1280.0, "guest_w": 1280.0,
		"coord_space": "physical", "screen_type": "x11", "hard": false, "drag": nil, "rescaled": nil, "screen_changed": nil,
		"atspi_error": nil, "ocr_error": nil, "session": session, "agent": "user", "label": "Далее", "vmid": 130.0,
		"atspi_widgets": float64(len(scr.Widgets))} {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
	if ts, ok := m["ts"].(string); !ok || ts == "" {
		t.Errorf("ts = %#v, want Unix seconds as a string", m["ts"])
	}
	words, err := dataset.ParseOCR(mustRead(t, filepath.Join(dir, l.OCR)))
	if err != nil || len(words) != len(scr.Words) || words[0] != scr.Words[0] {
		t.Fatalf("OCR sidecar: %v %v", words, err)
	}

	// The next shot of the agent, a restart, another agent.
	if l, _ = w.Write(shot); !strings.HasSuffix(l.Shot, "user-shot-0002.png") {
		t.Fatalf("second shot %s", l.Shot)
	}
	w2, _ := dataset.NewWriter(dir, 0)
	if l, _ = w2.Write(shot); !strings.HasSuffix(l.Shot, "user-shot-0003.png") {
		t.Fatalf("after a restart: %s", l.Shot)
	}
	shot.Agent = "holo-bot"
	if l, _ = w2.Write(shot); !strings.HasSuffix(l.Shot, "holo-bot-shot-0001.png") {
		t.Fatalf("another agent: %s", l.Shot)
	}
	c := w.Counters.Snapshot()
	if c.Shots != 2 || c.ATSPI != 2 || c.OCR != 2 || c.Clicks != 2 || c.ClicksWithoutIntent != 0 || c.HardScreens != 0 {
		t.Fatalf("counters %+v", c)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWriterDumpRules(t *testing.T) {
	dir := t.TempDir()
	w, _ := dataset.NewWriter(dir, 0)
	scr := datasettest.Draw(2, 1280, 800) // a hard screen (toolbar, list)
	frame := datasettest.PNG(scr.Image)
	write := func(dump []byte, line dataset.Line) dataset.Line {
		t.Helper()
		l, err := w.Write(dataset.Shot{Session: "s1", Agent: "a", PNG: frame, ATSPI: dump, OCR: scr.Words, Line: line})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	sidecar := func(l dataset.Line) *dataset.Dump {
		t.Helper()
		d, err := dataset.ParseDump(mustRead(t, filepath.Join(dir, l.ATSPI)))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// A dump that only reports an error is not a sidecar; the frame and OCR still are.
	l := write([]byte(`{"error":"no desktop session for user test (0 processes)","widgets":[]}`), dataset.Line{})
	if l.ATSPI != "" || l.ATSPIError != "no desktop session for user test (0 processes)" || l.OCR == "" || l.Hard != nil {
		t.Fatalf("error-only dump: %+v", l)
	}
	if _, err := os.Stat(filepath.Join(dir, dataset.ATSPIName(l.Shot))); !os.IsNotExist(err) {
		t.Fatalf("error-only dump written as a sidecar: %v", err)
	}
	// Unreadable output, and no dump at all.
	if l = write([]byte("Traceback (most recent call last)"), dataset.Line{}); l.ATSPI != "" || !strings.Contains(l.ATSPIError, "not an AT-SPI dump") {
		t.Fatalf("unreadable dump: %+v", l)
	}
	if l = write(nil, dataset.Line{ATSPIError: "installer: no python3"}); l.ATSPI != "" || l.ATSPIError != "installer: no python3" {
		t.Fatalf("no dump: %+v", l)
	}

	// Widgets that are not showing are dropped; a 1920x1080 guest is
	// scaled onto the 1280x800 frame and both sizes are kept.
	d := dataset.Dump{Screen: [2]int{1920, 1080}, Locale: "en_US.UTF-8", SessionType: "x11", Widgets: []dataset.Widget{
		{Role: "tool bar", X: 0, Y: 0, W: 1920, H: 40, States: []string{"showing", "visible"}},
		{Role: "push button", Name: "Hidden tab", X: 960, Y: 540, W: 96, H: 54, States: []string{"visible"}},
		{Role: "push button", Name: "OK", X: 960, Y: 540, W: 96, H: 54, States: []string{"showing", "visible"}},
	}}
	raw, _ := json.Marshal(d)
	l = write(raw, dataset.Line{Locale: "ru"})
	if l.Rescaled == nil || l.Rescaled.From != [2]int{1920, 1080} || l.Rescaled.To != [2]int{1280, 800} ||
		l.GuestW != 1920 || l.GuestH != 1080 || l.FrameW != 1280 || l.ATSPIWidgets != 2 || l.Hard == nil || !*l.Hard {
		t.Fatalf("rescaled line: %+v", l)
	}
	if l.Locale != "ru" || l.LocaleRaw != "ru" {
		t.Fatalf("the caller's locale wins: %q %q", l.Locale, l.LocaleRaw)
	}
	got := sidecar(l)
	if len(got.Widgets) != 2 || got.Screen != [2]int{1280, 800} {
		t.Fatalf("sidecar %+v", got)
	}
	if ok := got.Widgets[1]; ok.Name != "OK" || ok.X != 640 || ok.Y != 400 || ok.W != 64 || ok.H != 40 {
		t.Fatalf("OK scaled to %+v, want 640,400 64x40", ok)
	}

	// Wayland: logical coordinates, kept as they are for the exporter to place.
	d = dataset.Dump{Screen: [2]int{640, 400}, SessionType: "wayland", Locale: "de_DE.UTF-8", Widgets: []dataset.Widget{
		{Role: "frame", X: 0, Y: 0, W: 640, H: 400, States: []string{"showing"}}}}
	raw, _ = json.Marshal(d)
	l = write(raw, dataset.Line{})
	if l.CoordSpace != "logical" || l.Rescaled != nil || l.Locale != "de" || l.LocaleRaw != "de_DE.UTF-8" || l.ScreenType != "wayland" {
		t.Fatalf("wayland line: %+v", l)
	}
	// OCR that failed leaves no TSV.
	if l = write(nil, dataset.Line{OCRError: "tesseract: no rus data"}); l.OCR != "" {
		t.Fatalf("failed OCR written: %+v", l)
	}
	c := w.Counters.Snapshot()
	if c.Shots != 6 || c.ATSPI != 2 || c.ATSPIMissing != 4 || c.OCRMissing != 1 || c.Rescaled != 1 || c.HardScreens != 1 {
		t.Fatalf("counters %+v", c)
	}
}

func TestWriterRefusesBadShots(t *testing.T) {
	dir := t.TempDir()
	w, _ := dataset.NewWriter(dir, 0)
	frame := datasettest.PNG(datasettest.Draw(3, 64, 40).Image)
	for name, s := range map[string]dataset.Shot{
		"not a PNG":     {Session: "s", Agent: "a", PNG: []byte("\xff\xd8\xff\xe0 a JPEG")},
		"session ..":    {Session: "..", Agent: "a", PNG: frame},
		"session a/b":   {Session: "a/b", Agent: "a", PNG: frame},
		"agent with /":  {Session: "s", Agent: "../a", PNG: frame},
		"agent missing": {Session: "s", PNG: frame},
	} {
		if _, err := w.Write(s); err == nil || dataset.Outcome(err) != "failed" {
			t.Errorf("%s: %v", name, err)
		}
	}
	if c := w.Counters.Snapshot(); c.Failed != 5 || c.Shots != 0 {
		t.Fatalf("counters %+v", c)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused shot left %v", entries)
	}
}

// An index line is appended only after its files are on disk; when the
// append fails, the files go too.
func TestWriterIndexFailureLeavesNoFiles(t *testing.T) {
	dir := t.TempDir()
	w, _ := dataset.NewWriter(dir, 0)
	if err := os.Mkdir(filepath.Join(dir, dataset.IndexName), 0o755); err != nil { // cannot be opened for append
		t.Fatal(err)
	}
	scr := datasettest.Draw(4, 320, 200)
	_, err := w.Write(dataset.Shot{Session: "s", Agent: "a", PNG: datasettest.PNG(scr.Image), ATSPI: datasettest.DumpJSON(scr, "en"), OCR: scr.Words})
	if err == nil {
		t.Fatal("a write with no index succeeded")
	}
	if entries, err := os.ReadDir(filepath.Join(dir, "s")); err != nil || len(entries) != 0 {
		t.Fatalf("files left without an index line: %v %v", entries, err)
	}
	if c := w.Counters.Snapshot(); c.Failed != 1 {
		t.Fatalf("counters %+v", c)
	}
}

// A crash in the middle of an append leaves a line without its newline:
// the next line is not glued onto it.
func TestWriterEndsATornLine(t *testing.T) {
	dir := t.TempDir()
	w, _ := dataset.NewWriter(dir, 0)
	if err := os.WriteFile(filepath.Join(dir, dataset.IndexName), []byte(`{"shot":"s/a-shot-0001.png","atspi":nu`), 0o640); err != nil {
		t.Fatal(err)
	}
	l, err := w.Write(dataset.Shot{Session: "s", Agent: "a", PNG: datasettest.PNG(datasettest.Draw(5, 64, 40).Image)})
	if err != nil {
		t.Fatal(err)
	}
	var good, bad int
	dataset.ReadIndex(filepath.Join(dir, dataset.IndexName), func(e dataset.IndexEntry) error {
		if e.Err != nil {
			bad++
		} else if e.Line.Shot == l.Shot {
			good++
		}
		return nil
	})
	if good != 1 || bad != 1 {
		t.Fatalf("good %d bad %d", good, bad)
	}
}

// Several goroutines and two writers (as two processes would) on one
// capture: every shot gets its own number and its own line.
func TestWriterConcurrent(t *testing.T) {
	dir := t.TempDir()
	w1, _ := dataset.NewWriter(dir, 0)
	w2, _ := dataset.NewWriter(dir, 0)
	frame := datasettest.PNG(datasettest.Draw(6, 64, 40).Image)
	var wg sync.WaitGroup
	for g := range 6 {
		w := []*dataset.Writer{w1, w2}[g%2]
		wg.Go(func() {
			for range 10 {
				if _, err := w.Write(dataset.Shot{Session: "s", Agent: "a", PNG: frame}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	lines := readIndex(t, dir)
	seen := map[string]bool{}
	for _, m := range lines {
		shot := m["shot"].(string)
		if seen[shot] {
			t.Fatalf("%s written twice", shot)
		}
		seen[shot] = true
		if _, err := os.Stat(filepath.Join(dir, shot)); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 60 {
		t.Fatalf("%d distinct shots, want 60", len(seen))
	}
}

// The free-space floor: a floor above what the volume has stops capture
// (no_space), writes nothing, and the next shot is tried again.
func TestWriterNoSpaceFloor(t *testing.T) {
	dir := t.TempDir()
	free, err := dataset.FreeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := dataset.NewWriter(dir, int64(free>>20)+1024)
	frame := datasettest.PNG(datasettest.Draw(7, 64, 40).Image)
	_, err = w.Write(dataset.Shot{Session: "s", Agent: "a", PNG: frame})
	if !errors.Is(err, dataset.ErrNoSpace) || dataset.Outcome(err) != "no_space" {
		t.Fatalf("err %v", err)
	}
	if err := w.Room(); !errors.Is(err, dataset.ErrNoSpace) {
		t.Fatalf("Room: %v", err)
	}
	if c := w.Counters.Snapshot(); c.NoSpace != 2 || c.Shots != 0 || c.Failed != 0 {
		t.Fatalf("counters %+v", c)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("written below the floor: %v", entries)
	}
	st, err := dataset.StatusOf(dir, w.Counters.Snapshot(), int64(free>>20)+1024)
	if err != nil || st.Counters.NoSpace != 2 || !slices.ContainsFunc(st.Warnings, func(s string) bool { return strings.Contains(s, "no_space") }) {
		t.Fatalf("status %+v %v", st, err)
	}
}

// On a real small volume (a 12 MB tmpfs, floor 4 MB), capture stops at the
// floor instead of filling the disk: no write ever fails for want of
// space, and every index line points at files that are there.
func TestWriterNoSpaceTmpfs(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	w, _ := dataset.NewWriter(dir, 4)
	noise := image.NewRGBA(image.Rect(0, 0, 320, 200)) // incompressible: ~250 KB a PNG
	rng := rand.New(rand.NewPCG(1, 2))
	written := 0
	for i := 0; i < 100; i++ {
		for p := range noise.Pix {
			noise.Pix[p] = uint8(rng.Uint32())
		}
		_, err := w.Write(dataset.Shot{Session: "s", Agent: "a", PNG: datasettest.PNG(noise)})
		if errors.Is(err, dataset.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatalf("shot %d: %v (the floor should have stopped capture first)", i, err)
		}
		written++
	}
	if err := w.Room(); !errors.Is(err, dataset.ErrNoSpace) {
		t.Fatalf("Room at the floor: %v", err)
	}
	c := w.Counters.Snapshot()
	if c.NoSpace != 2 || c.Failed != 0 || written < 20 {
		t.Fatalf("written %d, counters %+v", written, c)
	}
	if free, _ := dataset.FreeBytes(dir); free < 3<<20 {
		t.Fatalf("capture went on to %d bytes free", free)
	}
	for _, m := range readIndex(t, dir) {
		if _, err := os.Stat(filepath.Join(dir, m["shot"].(string))); err != nil {
			t.Fatal(err)
		}
	}
	// Space comes back: capture resumes.
	os.RemoveAll(filepath.Join(dir, "s"))
	if err := w.Room(); err != nil {
		t.Fatalf("Room after freeing space: %v", err)
	}
	if _, err := w.Write(dataset.Shot{Session: "s", Agent: "a", PNG: datasettest.PNG(datasettest.Draw(1, 64, 40).Image)}); err != nil {
		t.Fatalf("after freeing space: %v", err)
	}
}

func TestNormalizeLocale(t *testing.T) {
	for raw, want := range map[string]string{"ru_RU.UTF-8": "ru", "ru_RU": "ru", "ru": "ru", "RU": "ru", "en-US": "en",
		"sr_RS@latin": "sr", "C": "C", "C.UTF-8": "C", "": ""} {
		if got := dataset.NormalizeLocale(raw); got != want {
			t.Errorf("%q -> %q, want %q", raw, got, want)
		}
	}
}

func TestOCRRoundTrip(t *testing.T) {
	words := []dataset.Word{{Box: image.Rect(10, 20, 50, 36), Text: "Далее", Conf: 96.5}, {Box: image.Rect(0, 0, 3, 3), Text: "a\tb", Conf: 0}}
	got, err := dataset.ParseOCR(dataset.FormatOCR(words))
	if err != nil || len(got) != 2 || got[0] != words[0] || got[1].Text != "a b" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"1\t2\t3\n", "x\ty\tw\th\ttext\tconf\n1\t2\t3\tfour\tw\t9\n", "1\t2\t-3\t4\tw\t9\n"} {
		if _, err := dataset.ParseOCR([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
