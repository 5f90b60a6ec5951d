package engine

import (
	"encoding/json"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/vision/visiontest"
	"github.com/poligon/poligon/internal/editdist"
	"github.com/poligon/poligon/internal/testvm"
)

// The debian-desktop template (images/debian-desktop): XFCE 4.18 under
// lightdm's GTK greeter, xfce4-terminal, DejaVu fonts and poligon-form, a
// GTK 3 application that logs what it sees.
const desktopVMID = 9020

// TestDebianDesktop proves the screen tools on a real desktop, through
// MCP, on one VM: the login through the real greeter, GUI programs
// launched into the session, their windows found where xfwm4 put them,
// typing into a GTK entry, anti-aliased text read in English and Russian,
// a GTK button clicked by its label and the stale-frame guard; then the
// training-dataset capture on the same desktop.
func TestDebianDesktop(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a Debian desktop VM")
	}
	// Parallel: it runs after the package's other tests, so TestMain's
	// build of the template has had their time.
	t.Parallel()
	cfg := testConfig(t, testvm.DataDir(t, "debian-desktop"))
	fake := visiontest.New()
	defer fake.Close()
	logs := &testvm.SyncBuffer{}
	_, cs := eyesServer(t, cfg, fake, logs)
	out := mustOK(t, cs, "vm_clone", map[string]any{"template_vmid": desktopVMID, "name": "desk", "full": false})
	vmid := atoi(t, vmidLine.FindStringSubmatch(out)[1])
	t.Cleanup(func() { call(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	start := time.Now()
	bootVM(t, cs, vmid)
	t.Logf("vm_start to guest agent %.1f s", time.Since(start).Seconds())

	// The greeter takes the password of the listed user; the login is over
	// when XFCE's desktop runs, and logind says whose session it is.
	login := time.Now()
	out = mustOK(t, cs, "vm_lightdm_login", map[string]any{"vmid": vmid, "session": "xfce"})
	if !strings.Contains(out, "test logged in: xfce4-session") {
		t.Fatalf("vm_lightdm_login = %q", out)
	}
	loginTook := time.Since(login)
	t.Logf("vm_lightdm_login %.1f s (vm_start to desktop %.1f s)", loginTook.Seconds(), time.Since(start).Seconds())
	session := shOK(t, cs, vmid, "loginctl show-session $(loginctl list-sessions --no-legend | awk '$3 == \"test\" {print $1; exit}') -p Name -p Type -p State -p Desktop | sort")
	if session != "Desktop=xfce\nName=test\nState=active\nType=x11\n" {
		t.Fatalf("loginctl after the login: %q", session)
	}
	keepFrameOnFailure(t, cs, vmid)
	// The desktop is on the screen: the panel's menu button reads (XFCE
	// may still be drawing its last parts when the login answers).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		out := mustOK(t, cs, "ui_read", map[string]any{"vmid": vmid})
		if strings.Contains(out, "Applications") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ui_read 30 s after the login shows no XFCE panel:\n%s", out)
		}
	}
	t.Logf("the panel reads %.1f s after the login answered", time.Since(login).Seconds()-loginTook.Seconds())

	// A GTK window painted magenta: its 12-pixel margin around the widgets
	// lets the test check the box ui_wait_for gives against the pixels.
	user := map[string]any{"vmid": vmid, "user": "test"}
	with := func(kv ...any) map[string]any { return withArgs(user, kv...) }
	out = mustOK(t, cs, "vm_exec_gui", with("command", "poligon-form --title poligon-form-test --background '#ff00ff' 'Hello from DejaVu Sans' 'Привет из DejaVu Sans'"))
	if !strings.HasPrefix(out, "running after 2 s") {
		t.Fatalf("vm_exec_gui poligon-form = %q", out)
	}
	out = mustOK(t, cs, "ui_wait_for", with("window", "poligon-form-test", "timeout", 50))
	m := windowAt.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ui_wait_for poligon-form-test = %q", out)
	}
	form := image.Rect(atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[1])+atoi(t, m[3]), atoi(t, m[2])+atoi(t, m[4]))
	waitLog(t, cs, vmid, `"event": "ready"`)
	mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 30})
	_, res := call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
	screen := decodePNG(t, res)
	// Inside each edge the margin is magenta; just outside, xfwm4's frame
	// and title bar are not.
	for i := 2; i < form.Dx()-2; i += 7 {
		for _, in := range []image.Point{{form.Min.X + i, form.Min.Y}, {form.Min.X + i, form.Max.Y - 1}} {
			if !magenta(screen.At(in.X, in.Y)) {
				t.Fatalf("pixel %v, on the top or bottom row of the box %v, is %v: not the window", in, form, screen.At(in.X, in.Y))
			}
		}
		for _, out := range []image.Point{{form.Min.X + i, form.Min.Y - 1}, {form.Min.X + i, form.Max.Y}} {
			if magenta(screen.At(out.X, out.Y)) {
				t.Fatalf("pixel %v, above or below the box %v, is the window's: the box misses rows", out, form)
			}
		}
	}
	for i := 2; i < form.Dy()-2; i += 7 {
		for _, in := range []image.Point{{form.Min.X, form.Min.Y + i}, {form.Max.X - 1, form.Min.Y + i}} {
			if !magenta(screen.At(in.X, in.Y)) {
				t.Fatalf("pixel %v, on the left or right column of the box %v, is %v: not the window", in, form, screen.At(in.X, in.Y))
			}
		}
		for _, out := range []image.Point{{form.Min.X - 1, form.Min.Y + i}, {form.Max.X, form.Min.Y + i}} {
			if magenta(screen.At(out.X, out.Y)) {
				t.Fatalf("pixel %v, left or right of the box %v, is the window's: the box misses columns", out, form)
			}
		}
	}

	// A terminal with text in DejaVu Sans Mono, beside the form's DejaVu
	// Sans: ui_read finds both, in both languages.
	out = mustOK(t, cs, "vm_exec_gui", with("command", `xfce4-terminal --title poligon-term --geometry 60x8+20+60 -x sh -c 'printf "Alpha Bravo Charlie\nPress Next to continue\nСъешь ещё этих булок\nНажмите Далее\n"; exec sleep 3600'`))
	if !strings.HasPrefix(out, "running after 2 s") {
		t.Fatalf("vm_exec_gui xfce4-terminal = %q", out)
	}
	out = mustOK(t, cs, "ui_wait_for", with("window", "poligon-term", "timeout", 50))
	if windowAt.FindStringSubmatch(out) == nil {
		t.Fatalf("ui_wait_for poligon-term = %q", out)
	}
	mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 30})
	// The terminal went up over the form: raise the form again (focus and
	// keyboard for the typing below).
	mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": form.Max.X - 6, "y": form.Min.Y + 6})
	mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 30})
	out = mustOK(t, cs, "ui_read", map[string]any{"vmid": vmid})
	at, _ := readRows(t, out)
	find := func(label string) (image.Point, bool) {
		for l, p := range at {
			if editdist.Levenshtein(l, label) <= 2 {
				return p, true
			}
		}
		return image.Point{}, false
	}
	for _, label := range []string{"Alpha Bravo Charlie", "Press Next to continue", "Съешь ещё этих булок", "Нажмите Далее",
		"Hello from DejaVu Sans", "Привет из DejaVu Sans"} {
		if _, ok := find(label); !ok {
			t.Errorf("ui_read did not read %q:\n%s", label, out)
		}
	}
	if t.Failed() {
		saveScreen(t, cs, vmid, "read")
		t.FailNow()
	}

	// Every printable ASCII character typed into the GTK entry arrives as
	// typed: the application reports the entry's text on Enter. The entry
	// has had the focus since the form opened; the click above raised it.
	var ascii strings.Builder
	for c := byte(' '); c <= '~'; c++ {
		ascii.WriteByte(c)
	}
	mustOK(t, cs, "ui_type", map[string]any{"vmid": vmid, "text": ascii.String() + "\n"})
	if got := waitLog(t, cs, vmid, `"event": "activate"`); got["text"] != ascii.String() {
		t.Fatalf("the entry got %q, want %q", got["text"], ascii.String())
	}

	// A real GTK button, found by OCR, pressed by its label.
	out = mustOK(t, cs, "ui_click_label", map[string]any{"vmid": vmid, "label": "Apply"})
	m = clickedAt.FindStringSubmatch(out)
	if m == nil || m[4] != "ocr" || !image.Pt(atoi(t, m[2]), atoi(t, m[3])).In(form) {
		t.Fatalf("ui_click_label Apply = %q, want an OCR hit inside the form %v", out, form)
	}
	apply := image.Pt(atoi(t, m[2]), atoi(t, m[3]))
	if got := waitLog(t, cs, vmid, `"event": "clicked"`); got["button"] != "Apply" || got["text"] != ascii.String() {
		t.Fatalf("the form saw %v, want Apply clicked with the typed text", got)
	}

	// The stale-frame guard: aim at Apply from a screenshot, move the form
	// away, and the click is refused; the form sees no second click.
	out = mustOK(t, cs, "ui_screenshot", map[string]any{"vmid": vmid, "scale": 0.5})
	fm := frameName.FindStringSubmatch(out)
	if fm == nil {
		t.Fatalf("ui_screenshot names no frame: %q", out)
	}
	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "DISPLAY=:0 XAUTHORITY=/home/test/.Xauthority xdotool search --name poligon-form-test windowmove 760 400"})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out = mustOK(t, cs, "ui_wait_for", with("window", "poligon-form-test", "timeout", 10))
		if m := windowAt.FindStringSubmatch(out); m != nil && atoi(t, m[1]) != form.Min.X {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdotool windowmove did not move the form: %q", out)
		}
	}
	mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 30})
	mustRefuse(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": apply.X, "y": apply.Y, "frame": fm[1]}, "changed near")
	if log := shOK(t, cs, vmid, "cat /tmp/poligon-form.log"); strings.Count(log, `"event": "clicked"`) != 1 {
		t.Fatalf("a refused click reached the form:\n%s", log)
	}

	// The training-dataset capture, on the same desktop (dataset_debian_test.go).
	captureOnDesktop(t, cfg, vmid)
}

// waitLog waits until poligon-form's log has a line with want and answers
// the last such line's fields.
func waitLog(t *testing.T, cs *mcp.ClientSession, vmid int, want string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "cat /tmp/poligon-form.log 2>/dev/null"})
		lines := regexp.MustCompile(`(?m)^\{.*`+regexp.QuoteMeta(want)+`.*\}$`).FindAllString(out, -1)
		if len(lines) > 0 {
			var fields map[string]any
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &fields); err != nil {
				t.Fatalf("poligon-form's log line %q: %v", lines[len(lines)-1], err)
			}
			return fields
		}
		if time.Now().After(deadline) {
			t.Fatalf("poligon-form logged no %s in 30 s:\n%s", want, out)
		}
	}
}

// saveScreen keeps the screen as it is now for a failed test to show.
func saveScreen(t *testing.T, cs *mcp.ClientSession, vmid int, name string) {
	t.Helper()
	_, res := call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
	if res.IsError || len(res.Content) < 2 {
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("poligon-desktop-%s-%d.png", name, vmid))
	if err := os.WriteFile(path, res.Content[len(res.Content)-1].(*mcp.ImageContent).Data, 0o644); err == nil {
		t.Logf("the screen is saved in %s", path)
	}
}
