package engine

import (
	"fmt"
	"image"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/latency"
	"github.com/poligon/poligon/internal/testvm"
)

// BenchmarkDatasetCapture measures what the training-dataset capture adds
// to ui_click with screenshot=true on a real desktop (debian-desktop, XFCE,
// logged in, a poligon-form window): the same click on the form's text,
// which changes nothing on the screen, through a server that does not
// capture and through one that does, alternating, on one VM. A capturing
// click takes its frame and the guest's AT-SPI dump before it acts and
// OCRs and writes it after; its screenshot afterwards is captured too. One
// iteration is one click of each; the VM boots once per run.
func BenchmarkDatasetCapture(b *testing.B) {
	cfg := perfConfig(b, testvm.DataDir(b, "debian-desktop"), "")
	off := perfConnect(b, perfServer(b, cfg), nil)
	capturing := *cfg
	capturing.Dataset = config.Dataset{Dir: b.TempDir(), XRandR: "off", MinFreeMB: 1}
	on := perfConnect(b, perfServer(b, &capturing), nil)

	out := perfCall(b, off, "vm_clone", map[string]any{"template_vmid": desktopVMID, "name": "capbench", "full": false})
	m := vmidLine.FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("vm_clone answered %q", out)
	}
	vmid := atoiB(b, m[1])
	b.Cleanup(func() { perfCall(b, off, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	perfCall(b, off, "vm_start", map[string]any{"vmid": vmid})
	for !strings.HasPrefix(perfCall(b, off, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 50}), "booted") {
	}
	perfCall(b, off, "vm_lightdm_login", map[string]any{"vmid": vmid, "session": "xfce"})
	perfCall(b, off, "vm_exec_gui", map[string]any{"vmid": vmid, "command": "poligon-form --title capbench 'Nothing changes here'"})
	win := perfCall(b, off, "ui_wait_for", map[string]any{"vmid": vmid, "window": "capbench", "timeout": 50})
	wm := windowAt.FindStringSubmatch(win)
	if wm == nil {
		b.Fatalf("ui_wait_for capbench = %q", win)
	}
	// The form's first line of text, below its title bar: a click there
	// changes nothing (the form already has the focus after one).
	at := image.Pt(atoiB(b, wm[1])+40, atoiB(b, wm[2])+20)
	click := func(cs *mcp.ClientSession) time.Duration {
		start := time.Now()
		perfCall(b, cs, "ui_click", map[string]any{"vmid": vmid, "x": at.X, "y": at.Y, "screenshot": true, "intent": "click the form's text"})
		return time.Since(start)
	}
	click(off) // the focus, and the OCR engines started
	click(on)
	var plain, captured latency.Latencies
	for b.Loop() {
		plain = append(plain, click(off))
		captured = append(captured, click(on))
	}
	b.StopTimer()
	p50off, p50on := plain.Quantile(0.5), captured.Quantile(0.5)
	b.ReportMetric(p50off, "off-p50-ms")
	b.ReportMetric(p50on, "on-p50-ms")
	b.ReportMetric(p50on-p50off, "extra-p50-ms")
	b.ReportMetric(p50on/p50off, "ratio")
}

func atoiB(b *testing.B, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		b.Fatalf("%q is not a number", s)
	}
	return n
}
