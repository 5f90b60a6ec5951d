package engine

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/internal/latency"
	"github.com/poligon/poligon/internal/testvm"
)

// BenchmarkConsoleShare measures ui_type of 50 characters on one tiny VM
// as users who share it see it. Each round types:
//
//   - alone: on server A, which typed last;
//   - switch: on server B (a second poligon process: its own console,
//     monitor and locks, one state directory), right after A;
//   - held: on A twice while a client of the user's own holds the VM's QMP
//     socket (QEMU serves one at a time): the first call finds the
//     monitor held (its lookup gives up after 250 ms), the next does not
//     ask (the backend watches the monitor until it is let go).
//
// and vm_exec of `true` on A right after A, then on B right after A (the
// guest agent's socket, too, serves one client at a time). Each figure
// types, then clears the line with ctrl-u on the same server. Reported: p50
// alone and each situation's extra p50 over it. Target: a switch costs
// <= 200 ms.
func BenchmarkConsoleShare(b *testing.B) {
	cfg := perfConfig(b, testvm.DataDir(b), b.TempDir())
	a, other := perfServer(b, cfg), perfServer(b, cfg)
	ca, cb := perfConnect(b, a, nil), perfConnect(b, other, nil)
	vmid := perfBoot(b, ca, "share")
	be := backendOf(b, a, "")
	sock := be.(*qemu.Driver).MonitorSocket(vmid)
	typ := func(cs *mcp.ClientSession) func() {
		return func() {
			perfCall(b, cs, "ui_type", map[string]any{"vmid": vmid, "text": "echo the quick brown fox jumps over the lazy dog"})
			perfCall(b, cs, "ui_key", map[string]any{"vmid": vmid, "key": "ctrl-u"})
		}
	}
	// ctrl-u's own call, to take off each figure.
	clear := func() { perfCall(b, ca, "ui_key", map[string]any{"vmid": vmid, "key": "ctrl-u"}) }
	typ(cb)()
	typ(ca)()
	exec := func(cs *mcp.ClientSession) func() {
		return func() { perfCall(b, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true"}) }
	}
	var alone, sw, heldFirst, heldNext, cl, execAlone, execSwitch latency.Latencies
	for b.Loop() {
		exec(ca)()
		execAlone.Time(exec(ca))
		execSwitch.Time(exec(cb))
		typ(ca)()
		alone.Time(typ(ca))
		sw.Time(typ(cb))
		cl.Time(clear)
		release := holdMonitor(b, sock)
		heldFirst.Time(typ(ca))
		heldNext.Time(typ(ca))
		release()
		time.Sleep(100 * time.Millisecond) // the backend sees the monitor let go
	}
	p50 := func(l latency.Latencies) float64 { return l.Quantile(0.5) }
	b.ReportMetric(p50(alone)-p50(cl), "alone-p50-ms")
	b.ReportMetric(p50(sw)-p50(alone), "switch-extra-p50-ms")
	b.ReportMetric(p50(heldFirst)-p50(alone), "held-first-extra-p50-ms")
	b.ReportMetric(p50(heldNext)-p50(alone), "held-next-extra-p50-ms")
	b.ReportMetric(p50(execAlone), "exec-alone-p50-ms")
	b.ReportMetric(p50(execSwitch)-p50(execAlone), "exec-switch-extra-p50-ms")
}

// holdMonitor connects to a QMP socket as a user's own tool would,
// negotiates and keeps the connection until released: QEMU then serves no
// other client.
func holdMonitor(tb testing.TB, sock string) func() {
	tb.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // the greeting
		tb.Fatal(err)
	}
	if _, err := c.Write([]byte(`{"execute":"qmp_capabilities"}` + "\n")); err != nil {
		tb.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err != nil {
		tb.Fatal(err)
	}
	return func() { c.Close() }
}
