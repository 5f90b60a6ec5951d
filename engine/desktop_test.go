package engine

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/testvm"
)

// TestDesktopOnTinyX drives the window tools against a real X11 desktop
// (tiny-x: Xorg, twm, xterm, xdotool; everything runs as root): wait for a
// window, launch a GUI program into the session, crop a screenshot to its
// window, click into it and type, wait for it to go.
func TestDesktopOnTinyX(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a desktop VM")
	}
	cfg := testConfig(t, testvm.DataDir(t, "tiny-x"))
	_, cs := newServer(t, cfg)
	out := mustOK(t, cs, "vm_clone", map[string]any{"template_vmid": 9001, "name": "desk", "full": false})
	vmid := atoi(t, vmidLine.FindStringSubmatch(out)[1])
	t.Cleanup(func() { call(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	bootVM(t, cs, vmid)
	root := map[string]any{"vmid": vmid, "user": "root"}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range root {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	// The session's own xterm shows once X is up.
	out = mustOK(t, cs, "ui_wait_for", with("window", "xterm", "timeout", 50))
	if !regexp.MustCompile(`^window ".*" after [0-9.]+ s at \d+,\d+ \d+x\d+`).MatchString(out) {
		t.Fatalf("ui_wait_for xterm = %q", out)
	}

	out = mustOK(t, cs, "vm_exec_gui", with("command", "xterm -title poligon-gui-test -geometry 40x10+300+200"))
	if !strings.HasPrefix(out, "running after 2 s") {
		t.Fatalf("vm_exec_gui = %q", out)
	}
	out = mustOK(t, cs, "ui_wait_for", with("window", "poligon-gui-test", "timeout", 30, "screenshot", true, "scale", 0.5))
	m := regexp.MustCompile(`at (\d+),(\d+) (\d+)x(\d+)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "(scale 0.5 of 1280x800)") {
		t.Fatalf("ui_wait_for poligon-gui-test = %q", out)
	}
	x, y, w, h := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3]), atoi(t, m[4])

	out, res := call(t, cs, "ui_screenshot", with("region", "poligon-gui-test"))
	if res.IsError || !strings.HasPrefix(out, m[3]+"x"+m[4]+"\n") || !strings.Contains(out, `window `) || len(res.Content) != 2 {
		t.Fatalf("ui_screenshot region = %q", out)
	}
	mustRefuse(t, cs, "ui_screenshot", with("region", "no-such-window", "path", "refused.png"), "hint: visible windows:")
	if _, err := os.Stat(filepath.Join(cfg.EvidenceDir, "refused.png")); !os.IsNotExist(err) {
		t.Fatalf("a refused screenshot saved its file: %v", err)
	}

	// Click into the new xterm (twm focuses what the pointer is in), type.
	out = mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": x + w/2, "y": y + h/2, "screenshot": true, "settle_ms": 3000})
	if !strings.Contains(out, "timing: ") {
		t.Fatalf("ui_click with screenshot = %q", out)
	}
	mustOK(t, cs, "ui_type", map[string]any{"vmid": vmid, "text": "echo clicked-$((40+2)) > /tmp/clicked\n"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "cat /tmp/clicked 2>/dev/null"}); out == "exit 0\nclicked-42\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("typing into the clicked xterm did not run: %q", out)
		}
		time.Sleep(300 * time.Millisecond)
	}

	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "xdotool search --name poligon-gui-test windowkill"})
	if out := mustOK(t, cs, "ui_wait_for", with("window", "poligon-gui-test", "gone", true, "timeout", 20)); !strings.HasPrefix(out, `window "poligon-gui-test" gone after`) {
		t.Fatalf("ui_wait_for gone = %q", out)
	}
	mustRefuse(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "window": "xterm", "user": "nobody"}, "no desktop session of nobody")
}
