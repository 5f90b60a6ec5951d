package engine

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/internal/testvm"
)

// TestCaptureOCRFrame makes the OCR benchmark's frame, a tiny-x screen full
// of text: four xterms (6x13) tiling the screen, two of English, two of
// Russian lines (backends/ocr/testdata/tinyx/*.txt). It runs only when
// asked:
//
//	POLIGON_CAPTURE_OCR_FRAME=backends/ocr/testdata/tinyx go test -run TestCaptureOCRFrame ./engine
func TestCaptureOCRFrame(t *testing.T) {
	dir := os.Getenv("POLIGON_CAPTURE_OCR_FRAME")
	if dir == "" {
		t.Skip("set POLIGON_CAPTURE_OCR_FRAME to the directory to write full.png to")
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir)
	}
	_, cs := newServer(t, testConfig(t, testvm.DataDir(t, "tiny-x")))
	out := mustOK(t, cs, "vm_clone", map[string]any{"template_vmid": 9001, "name": "ocrframe", "full": false})
	vmid := atoi(t, vmidLine.FindStringSubmatch(out)[1])
	t.Cleanup(func() { call(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	bootVM(t, cs, vmid)
	mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "user": "root", "window": "xterm", "timeout": 50})
	// The session's own xterm goes: only the four remain.
	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "xdotool search --name xterm windowkill"})
	for i, f := range []struct {
		file string
		x, y int
	}{{"en1.txt", 4, 24}, {"ru1.txt", 644, 24}, {"ru2.txt", 4, 414}, {"en2.txt", 644, 414}} {
		b, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		mustOK(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": "/tmp/" + f.file, "content_base64": base64.StdEncoding.EncodeToString(b)})
		title := fmt.Sprintf("text%d", i)
		mustOK(t, cs, "vm_exec_gui", map[string]any{"vmid": vmid, "user": "root",
			"command": fmt.Sprintf(`xterm -title %s -geometry 104x27+%d+%d -e sh -c 'printf "\033[?25l"; cat /tmp/%s; sleep 3600'`, title, f.x, f.y, f.file)})
		mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "user": "root", "window": title, "timeout": 30})
	}
	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "xdotool mousemove 1279 799"})
	mustOK(t, cs, "ui_wait_for", map[string]any{"vmid": vmid, "timeout": 20})
	_, res := call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
	decodePNG(t, res) // a screenshot, whole
	if err := os.WriteFile(filepath.Join(dir, "full.png"), res.Content[1].(*mcp.ImageContent).Data, 0o644); err != nil {
		t.Fatal(err)
	}
}
