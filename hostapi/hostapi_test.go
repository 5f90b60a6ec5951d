package hostapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/poligon/poligon/backends/backendtest"
)

func TestEvidencePath(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(dir, "link"))
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.Symlink(filepath.Join(outside, "f.png"), filepath.Join(dir, "sub", "file-link.png"))
	for _, c := range []struct {
		path, want string // want: "" = accepted
	}{
		{"a.png", ""},
		{"shots/day1/a.png", ""},
		{filepath.Join(dir, "abs.png"), ""},
		{"../x.png", "leaves the evidence directory"},
		{"shots/../../x.png", "leaves the evidence directory"},
		{"/tmp/x.png", "outside the evidence directory"},
		{filepath.Join(outside, "x.png"), "outside the evidence directory"},
		{"link/x.png", "symlink"},
		{"sub/file-link.png", "symlink"},
		{"", "path is empty"},
		{".", "outside the evidence directory"},
	} {
		_, err := EvidencePath(dir, c.path)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: refused: %v", c.path, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: err = %v, want %q", c.path, err, c.want)
		case c.want != "" && HintOf(err) == "":
			t.Errorf("%q: refusal without a hint", c.path)
		}
	}
	if _, err := EvidencePath("", "a.png"); err == nil || !strings.Contains(err.Error(), "no evidence directory") {
		t.Errorf("no evidence dir: err = %v", err)
	}
	rel, err := SaveEvidence(dir, "deep/er/a.png", []byte("png"))
	if err != nil || rel != "deep/er/a.png" {
		t.Fatalf("SaveEvidence = %q, %v", rel, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "deep/er/a.png")); string(b) != "png" {
		t.Fatalf("saved %q", b)
	}
	if _, err := SaveEvidence(dir, "link/a.png", []byte("x")); err == nil {
		t.Fatal("SaveEvidence followed a symlink")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("something was written outside: %v", entries)
	}
}

func TestLocks(t *testing.T) {
	l := NewLocks(t.TempDir())
	ctx := context.Background()
	release, err := l.Acquire(ctx, "b", 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "b", 1, 50*time.Millisecond); err == nil || err.Error() != "vmid 1 is busy" {
		t.Fatalf("a held lock: err = %v", err)
	}
	other, err := l.Acquire(ctx, "b", 2, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("another VM's lock: %v", err)
	}
	other()
	if _, err := l.Acquire(ctx, "elsewhere", 1, 50*time.Millisecond); err != nil {
		t.Fatalf("the same vmid on another bench: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Acquire(cctx, "b", 1, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: err = %v", err)
	}
	release()
	release() // twice is harmless
	if _, err := l.Acquire(ctx, "b", 1, 50*time.Millisecond); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// TestLocksAcrossProcesses: two lock tables on one directory stand for two
// poligon processes (flock conflicts between open files, even in one
// process).
func TestLocksAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	server, run := NewLocks(dir), NewLocks(dir)
	ctx := context.Background()
	release, err := server.Acquire(ctx, "/data", 100, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Acquire(ctx, "/data", 100, 100*time.Millisecond)
	if err == nil || err.Error() != "vmid 100 is busy" || !strings.Contains(HintOf(err), "another poligon process") {
		t.Fatalf("a VM another process holds: err = %v (hint %q)", err, HintOf(err))
	}
	if r, err := run.Acquire(ctx, "/other-data", 100, 100*time.Millisecond); err != nil {
		t.Fatalf("vmid 100 of another data directory: %v", err)
	} else {
		r()
	}
	got := make(chan error, 1)
	go func() {
		r, err := run.Acquire(ctx, "/data", 100, backendtest.HangGuard)
		if err == nil {
			r()
		}
		got <- err
	}()
	// Released only once the waiter polls the other process's flock.
	backendtest.WaitParked(t, "hostapi.(*Locks).lockFile", func() bool { return len(got) > 0 })
	release()
	if err := <-got; err != nil {
		t.Fatalf("waiting for the other process's release: %v", err)
	}
	// A refused wait left the in-process slot free.
	if r, err := run.Acquire(ctx, "/data", 100, 100*time.Millisecond); err != nil {
		t.Fatalf("after a refused wait: %v", err)
	} else {
		r()
	}
}

func TestSignificantChange(t *testing.T) {
	a := image.NewRGBA(image.Rect(0, 0, 720, 400))
	b := image.NewRGBA(a.Bounds())
	if significantChange(a, b) {
		t.Fatal("equal frames differ")
	}
	// A blinking text cursor: two scanlines of one 9x16 cell.
	for x := 72; x < 80; x++ {
		for y := 62; y < 64; y++ {
			b.Pix[(y*720+x)*4] = 0xAA
		}
	}
	if significantChange(a, b) {
		t.Fatal("a blinking cursor counts as a change")
	}
	// A typed character: its cell and the cursor moved one cell on.
	for x := 81; x < 89; x++ {
		b.Pix[(50*720+x)*4] = 0xAA
	}
	if !significantChange(a, b) {
		t.Fatal("new text does not count as a change")
	}
	if !significantChange(a, image.NewRGBA(image.Rect(0, 0, 1024, 768))) {
		t.Fatal("a resolution change does not count")
	}
}

// jpegConsole draws a VGA text console (grey glyphs in 9x16 cells on
// black, the cursor an underline in cell col,row unless col < 0), edits
// it, and answers it as kvmd serves it: JPEG at uStreamer's quality 80.
func jpegConsole(t *testing.T, lines []string, col, row int, edit func(*image.RGBA)) *image.RGBA {
	t.Helper()
	grey := image.NewUniform(color.RGBA{0xaa, 0xaa, 0xaa, 0xff})
	img := image.NewRGBA(image.Rect(0, 0, 720, 400))
	draw.Draw(img, img.Rect, image.Black, image.Point{}, draw.Src)
	d := font.Drawer{Dst: img, Src: grey, Face: basicfont.Face7x13}
	for r, l := range lines {
		for c, ch := range l {
			d.Dot = fixed.P(c*9+1, r*16+12)
			d.DrawString(string(ch))
		}
	}
	if col >= 0 {
		draw.Draw(img, image.Rect(col*9, row*16+13, col*9+9, row*16+15), grey, image.Point{}, draw.Src)
	}
	if edit != nil {
		edit(img)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	dec, err := jpeg.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	out := image.NewRGBA(dec.Bounds())
	draw.Draw(out, out.Rect, dec, image.Point{}, draw.Src)
	return out
}

func TestLossyChange(t *testing.T) {
	mcu := image.Pt(16, 16) // Go's and uStreamer's JPEGs are 4:2:0
	screen := []string{"Debian GNU/Linux 12 poligon tty1", "", "poligon login: root", "root@poligon:~# ls /etc | wc -l", "147"}
	prompt := func(line string) []string { // line on the last row
		s := append([]string(nil), screen...)
		for len(s) <= 24 {
			s = append(s, "")
		}
		s[24] = line
		return s
	}
	// A blink anywhere on a prompt line, in every alignment of the 9-pixel
	// cells to the 16-pixel blocks, and on the first and last rows.
	lines := prompt("root@poligon:~# ")
	oldRuleMissed := false
	for _, row := range []int{0, 3, 24} {
		for col := 16; col < 32; col++ {
			on, off := jpegConsole(t, lines, col, row, nil), jpegConsole(t, lines, -1, 0, nil)
			if lossyChange(on, off, mcu) || lossyChange(off, on, mcu) {
				t.Errorf("a blink at col %d row %d counts as a change", col, row)
			}
			oldRuleMissed = oldRuleMissed || significantChange(on, off)
		}
	}
	if !oldRuleMissed {
		t.Error("no blink reached beyond the 9x16 cell: the frames are not like kvmd's")
	}

	base := jpegConsole(t, lines, 16, 24, nil)
	if lossyChange(base, jpegConsole(t, lines, 16, 24, nil), mcu) {
		t.Error("the same screen counts as a change")
	}
	typed := jpegConsole(t, prompt("root@poligon:~# l"), 17, 24, nil)
	if !lossyChange(base, typed, mcu) {
		t.Error("a typed character (and the cursor moving on) does not count as a change")
	}
	word := func(img *image.RGBA) {
		d := font.Drawer{Dst: img, Src: image.White, Face: basicfont.Face7x13, Dot: fixed.P(30*9, 12*16+12)}
		d.DrawString("changed")
	}
	if !lossyChange(base, jpegConsole(t, lines, 16, 24, word), mcu) {
		t.Error("a word elsewhere does not count as a change")
	}
	if !lossyChange(base, jpegConsole(t, lines, -1, 0, word), mcu) {
		t.Error("a word elsewhere, the cursor blinking meanwhile, does not count as a change")
	}
	faint := func(img *image.RGBA) { // a highlight 30 levels up, no cursor near
		for y := 200; y < 220; y++ {
			for x := 300; x < 340; x++ {
				for c := range 3 {
					img.Pix[img.PixOffset(x, y)+c] += 30
				}
			}
		}
	}
	if !lossyChange(base, jpegConsole(t, lines, 16, 24, faint), mcu) {
		t.Error("a faint change away from the cursor does not count")
	}
	if !lossyChange(base, image.NewRGBA(image.Rect(0, 0, 1024, 768)), mcu) {
		t.Error("a resolution change does not count")
	}
	// Lossless frames keep the exact rule.
	if !frameChange(Frame{Image: base}, Frame{Image: jpegConsole(t, lines, -1, 0, nil)}) {
		t.Error("a lossless frame's comparison allowed for JPEG blocks")
	}
	if frameChange(Frame{Image: base}, Frame{Image: jpegConsole(t, lines, -1, 0, nil), Block: mcu}) {
		t.Error("a JPEG frame's comparison did not allow for its blocks")
	}
}

func TestShellArgs(t *testing.T) {
	if got := shellArgs("echo hi"); got[1] != "umask 022\necho hi" {
		t.Fatalf("ASCII: %q", got)
	}
	// Non-ASCII bytes go to the backend as they are: carrying them is the
	// backend's business (pve encodes them, qemu-ga takes them raw).
	got := shellArgs("echo привет")
	if got[1] != "umask 022\necho привет" {
		t.Fatalf("non-ASCII: %q", got)
	}
	// The wrapped command does the same in a real shell.
	out, err := exec.Command("sh", got...).CombinedOutput()
	if err != nil || string(out) != "привет\n" {
		t.Fatalf("sh %q = %q, %v", got, out, err)
	}
	out, _ = exec.Command("sh", shellArgs("umask")...).Output()
	if strings.TrimSpace(string(out)) != "0022" {
		t.Fatalf("umask = %q", out)
	}
}

// TestRunScript runs vm_run's guest state machine in this machine's shell:
// start, running, done, a finished run not repeated, restart, a failure.
func TestRunScript(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	state := func(dir, action, cmd string) RunState {
		t.Helper()
		out, err := exec.Command("sh", "-c", runScript, "poligon-run", dir, action, base64.StdEncoding.EncodeToString([]byte(cmd))).CombinedOutput()
		if err != nil {
			t.Fatalf("run.sh %s: %v\n%s", action, err, out)
		}
		return parseRunState(string(out))
	}
	// finished polls a run's state until it is no longer running (the
	// deadline only guards against a hang).
	finished := func(dir, cmd string) RunState {
		t.Helper()
		for deadline := time.Now().Add(backendtest.HangGuard); ; {
			if st := state(dir, "status", cmd); st.State != "running" {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatal("never finished")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The command runs until the test creates its gate file: "running" is
	// its state however slow the machine is.
	gate := dir + ".gate"
	cmd := "echo one >> " + dir + ".count; while [ ! -e " + gate + " ]; do sleep 0.05; done; echo tail-line"
	if st := state(dir, "start", cmd); st.State != "running" {
		t.Fatalf("just started: %+v", st)
	}
	if st := state(dir, "status", cmd); st.State != "running" {
		t.Fatalf("asked again while it waits: %+v", st)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := finished(dir, cmd); st.State != "done" || st.Exit != 0 || st.Tail != "tail-line" {
		t.Fatalf("finished: %+v", st)
	}
	if st := state(dir, "start", cmd); st.State != "done" {
		t.Fatalf("a finished run was started again: %+v", st)
	}
	if b, _ := os.ReadFile(dir + ".count"); string(b) != "one\n" {
		t.Fatalf("ran %q", b)
	}
	state(dir, "restart", cmd)
	finished(dir, cmd)
	if b, _ := os.ReadFile(dir + ".count"); string(b) != "one\none\n" {
		t.Fatalf("restart did not run it again: %q", b)
	}
	fail := filepath.Join(t.TempDir(), "fail")
	state(fail, "start", "echo oops; exit 7")
	if st := finished(fail, ""); st.State != "failed" || st.Exit != 7 || st.Tail != "oops" {
		t.Fatalf("a failing run: %+v", st)
	}
}

func TestSanitizeOwner(t *testing.T) {
	for in, want := range map[string]string{"Ivan.Petrov": "ivanpetrov", "user": "user", "a.b": "ab", "Ünïcode-42": "ncode42", "...": ""} {
		if got := SanitizeOwner(in); got != want {
			t.Errorf("SanitizeOwner(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScriptKeepsTheLastShots(t *testing.T) {
	h := &Script{}
	var first string
	for i := 0; i < keptShots+2; i++ {
		a := h.keep(Frame{Image: image.NewRGBA(image.Rect(0, 0, 4, 4))})
		if i == 0 {
			first = a.Image
		}
	}
	if _, ok := h.Shot(first); ok {
		t.Fatal("the first of 10 shots is still kept")
	}
	if _, id, ok := h.LastShot(); !ok || id != "shot-10" || len(h.shots) != keptShots {
		t.Fatalf("last %q, %d kept", id, len(h.shots))
	}
}
