package engine

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/vision/visiontest"
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
	fake := visiontest.New()
	defer fake.Close()
	logs := &testvm.SyncBuffer{}
	srv, cs := eyesServer(t, cfg, fake, logs)
	out := mustOK(t, cs, "vm_clone", map[string]any{"template_vmid": 9001, "name": "desk", "full": false})
	vmid := atoi(t, vmidLine.FindStringSubmatch(out)[1])
	t.Cleanup(func() { call(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	bootVM(t, cs, vmid)
	root := map[string]any{"vmid": vmid, "user": "root"}
	with := func(kv ...any) map[string]any { return withArgs(root, kv...) }

	// The session's own xterm shows once X is up.
	out = mustOK(t, cs, "ui_wait_for", with("window", "xterm", "timeout", 50))
	if !regexp.MustCompile(`^window ".*" after [0-9.]+ s at \d+,\d+ \d+x\d+`).MatchString(out) {
		t.Fatalf("ui_wait_for xterm = %q", out)
	}

	// A solid magenta xterm over the black root window, where the issue saw
	// xdotool place it a title bar (19 px under twm) too low.
	out = mustOK(t, cs, "vm_exec_gui", with("command", "xterm -title poligon-gui-test -geometry 40x10+700+450 -bg '#ff00ff' -fg '#ff00ff' -cr '#ff00ff'"))
	if !strings.HasPrefix(out, "running after 2 s") {
		t.Fatalf("vm_exec_gui = %q", out)
	}
	out = mustOK(t, cs, "ui_wait_for", with("window", "poligon-gui-test", "timeout", 30, "screenshot", true, "scale", 0.5))
	m := regexp.MustCompile(`at (\d+),(\d+) (\d+)x(\d+)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "(scale 0.5 of 1280x800)") {
		t.Fatalf("ui_wait_for poligon-gui-test = %q", out)
	}
	x, y, w, h := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3]), atoi(t, m[4])
	box := image.Rect(x, y, x+w, y+h)

	// The answer against the pixels: the crop is the window from its first
	// row to its last (all magenta), and the screen just outside each edge
	// of the box (title bar, frame) is not the window. Mapped is not yet
	// painted: first let the screen settle (and keep it for the edges).
	out, res := call(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 20, "screenshot": true})
	if !strings.HasPrefix(out, "1280x800\nscreen settled after") || !frameName.MatchString(out) {
		t.Fatalf("ui_wait_for a still screen = %q", out)
	}
	screen := decodePNG(t, res)
	out, res = call(t, cs, "ui_screenshot", with("region", "poligon-gui-test"))
	if res.IsError || !strings.HasPrefix(out, m[3]+"x"+m[4]+"\n") || !strings.Contains(out, `window `) || len(res.Content) != 2 {
		t.Fatalf("ui_screenshot region = %q", out)
	}
	crop := decodePNG(t, res)
	if crop.Bounds().Size() != box.Size() {
		t.Fatalf("crop is %v, the window %v", crop.Bounds().Size(), box.Size())
	}
	for py := crop.Bounds().Min.Y; py < crop.Bounds().Max.Y; py++ {
		for px := crop.Bounds().Min.X; px < crop.Bounds().Max.X; px++ {
			if !magenta(crop.At(px, py)) {
				t.Fatalf("crop pixel %d,%d is %v, not the window's magenta: the box %v is not where the window is", px, py, crop.At(px, py), box)
			}
		}
	}
	for i := 0; i < w; i++ {
		for _, p := range []image.Point{{x + i, y - 1}, {x + i, y + h}} {
			if magenta(screen.At(p.X, p.Y)) {
				t.Fatalf("pixel %v outside the box %v (above or below) is the window's: the box misses rows", p, box)
			}
		}
	}
	for i := 0; i < h; i++ {
		for _, p := range []image.Point{{x - 1, y + i}, {x + w, y + i}} {
			if magenta(screen.At(p.X, p.Y)) {
				t.Fatalf("pixel %v outside the box %v (left or right) is the window's: the box misses columns", p, box)
			}
		}
	}
	mustRefuse(t, cs, "ui_screenshot", with("region", "no-such-window", "path", "refused.png"), "hint: visible windows:")
	if _, err := os.Stat(filepath.Join(cfg.EvidenceDir, "refused.png")); !os.IsNotExist(err) {
		t.Fatalf("a refused screenshot saved its file: %v", err)
	}

	// Click into the new xterm's last rows (twm focuses what the pointer is
	// in; a box a title bar too low would click the root window), type.
	out = mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": x + w/2, "y": y + h - 3, "screenshot": true, "settle_ms": 3000})
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

	// A click lands where it was aimed after the guest moved the pointer
	// (issue 18): the kernel drops a tablet axis whose value did not change,
	// so a click at the previous click's height that sent the same y would
	// leave the pointer at the height xdotool put it.
	px, py := x+w/2, y+h/2
	for i, aim := range []image.Point{{px - 20, py}, {px + 20, py}, {px + 20, py + 30}} {
		mustOK(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": aim.X, "y": aim.Y})
		out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "xdotool getmouselocation"})
		m := regexp.MustCompile(`x:(\d+) y:(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("xdotool getmouselocation = %q", out)
		}
		if at := image.Pt(atoi(t, m[1]), atoi(t, m[2])); abs(at.X-aim.X) > 1 || abs(at.Y-aim.Y) > 1 {
			t.Errorf("click %d aimed at %v landed at %v, after xdotool had moved the pointer", i, aim, at)
		}
		mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": fmt.Sprintf("xdotool mousemove %d %d", x+5, y+5+i)})
	}

	// Nothing is installed behind these read-only tools: without xwininfo
	// a window is found but not placed, without xdotool not found; each
	// answer says how to install what is missing.
	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "mv /usr/bin/xwininfo /usr/bin/xwininfo.off"})
	out = mustOK(t, cs, "ui_wait_for", with("window", "poligon-gui-test", "timeout", 0))
	if !strings.Contains(out, "at an unknown position: xwininfo is missing") || !strings.Contains(out, "hint: install it with vm_exec: ") {
		t.Fatalf("ui_wait_for without xwininfo = %q", out)
	}
	mustRefuse(t, cs, "ui_screenshot", with("region", "poligon-gui-test"), `hint: install it with vm_exec: "apt-get install -y x11-utils" (Debian, Ubuntu)`)
	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "mv /usr/bin/xwininfo.off /usr/bin/xwininfo && mv /usr/bin/xdotool /usr/bin/xdotool.off"})
	mustRefuse(t, cs, "ui_wait_for", with("window", "poligon-gui-test", "timeout", 0), `hint: install it with vm_exec: "apt-get install -y xdotool"`)

	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "mv /usr/bin/xdotool.off /usr/bin/xdotool && xdotool search --name poligon-gui-test windowkill"})
	if out := mustOK(t, cs, "ui_wait_for", with("window", "poligon-gui-test", "gone", true, "timeout", 20)); !strings.HasPrefix(out, `window "poligon-gui-test" gone after`) {
		t.Fatalf("ui_wait_for gone = %q", out)
	}
	mustRefuse(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "window": "xterm", "user": "nobody"}, "no desktop session of nobody")

	// The same VM serves the eyes' checks: one desktop boot for both.
	t.Run("eyes", func(t *testing.T) { eyesOnTinyX(t, srv, cs, vmid, fake, logs) })
}

// withArgs answers base with the key, value pairs kv added.
func withArgs(base map[string]any, kv ...any) map[string]any {
	m := maps.Clone(base)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// decodePNG decodes the image of a screenshot answer.
func decodePNG(t *testing.T, res *mcp.CallToolResult) image.Image {
	t.Helper()
	if res.IsError || len(res.Content) != 2 {
		t.Fatalf("not a screenshot: %q", resultText(res))
	}
	img, err := png.Decode(bytes.NewReader(res.Content[1].(*mcp.ImageContent).Data))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// magenta tells the test window's colour (#ff00ff) from twm's title bar
// and frame and the black root window.
func magenta(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r>>8 > 0xf0 && g>>8 < 0x10 && b>>8 > 0xf0
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
