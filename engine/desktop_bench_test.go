package engine

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/latency"
	"github.com/poligon/poligon/internal/testvm"
)

// BenchmarkDesktopLogin times the debian-desktop template from a linked
// clone to its desktop, through the tools, as an agent would: vm_start to
// the guest agent, to the greeter drawn (its process runs and ui_read finds
// text), and
// vm_lightdm_login to the XFCE desktop drawn; vm_start to desktop is the
// sum. One VM per iteration, destroyed after it.
func BenchmarkDesktopLogin(b *testing.B) {
	cfg := perfConfig(b, testvm.DataDir(b, "debian-desktop"), "")
	s := perfServer(b, cfg)
	cs := perfConnect(b, s, nil)
	var agent, greeter, login, desktop latency.Latencies
	n := 0
	for b.Loop() {
		out := perfCall(b, cs, "vm_clone", map[string]any{"template_vmid": desktopVMID, "name": fmt.Sprintf("deskbench%d", n), "full": false})
		n++
		m := vmidLine.FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("vm_clone answered %q", out)
		}
		vmid, _ := strconv.Atoi(m[1])
		start := time.Now()
		perfCall(b, cs, "vm_start", map[string]any{"vmid": vmid})
		for !strings.HasPrefix(perfCall(b, cs, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 50}), "booted") {
		}
		agent = append(agent, time.Since(start))
		// Until X starts, tty1's login prompt is text too: the greeter is
		// drawn once its process runs and the screen has text.
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			up := strings.HasPrefix(perfCall(b, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "pgrep -x lightdm-gtk-gre"}), "exit 0")
			if up && !strings.Contains(perfCall(b, cs, "ui_read", map[string]any{"vmid": vmid}), "no text found") {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("no greeter on the screen 3 minutes after vm_start")
			}
		}
		greeter = append(greeter, time.Since(start))
		t0 := time.Now()
		perfCall(b, cs, "vm_lightdm_login", map[string]any{"vmid": vmid, "session": "xfce"})
		login = append(login, time.Since(t0))
		desktop = append(desktop, time.Since(start))
		b.StopTimer()
		perfCall(b, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50})
		b.StartTimer()
	}
	for _, m := range []struct {
		ds   latency.Latencies
		name string
	}{{agent, "agent-s"}, {greeter, "greeter-s"}, {login, "login-s"}, {desktop, "desktop-s"}} {
		b.ReportMetric(m.ds.Quantile(0.5)/1000, m.name) // p50, in seconds
	}
}
