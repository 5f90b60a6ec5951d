package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/latency"
	"github.com/poligon/poligon/internal/testvm"
)

// BenchmarkStand builds a stand of two independent tiny machines on the
// local backend (TCG where KVM does not run) and reports its wall time
// against the sum of the machines' own build times (clone to snapshot),
// measured in the same build: the aim is <= 0.6x. While it builds, a
// client polls stand_status: its p99 is the status latency figure (aim <=
// 50 ms).
func BenchmarkStand(b *testing.B) {
	cfg := perfConfig(b, testvm.DataDir(b), "")
	s := perfServer(b, cfg)
	if err := s.LoadScripts(context.Background()); err != nil {
		b.Fatal(err)
	}
	cs := perfConnect(b, s, nil)
	var wall, sum float64
	var status latency.Latencies
	n := 0
	for b.Loop() {
		name := fmt.Sprintf("perf%d", n)
		n++
		plan := json.RawMessage(`{"name": "` + name + `", "machines": [
			{"role": "a", "template": "tiny", "steps": [{"exec": "echo a > /root/a"}, {"expect": {"command": "cat /root/a", "contains": "a"}}]},
			{"role": "b", "template": "tiny", "steps": [{"exec": "echo b > /root/b"}, {"expect": {"command": "cat /root/b", "contains": "b"}}]}]}`)
		perfCall(b, cs, "stand_apply", map[string]any{"plan": plan})
		var v StandView
		for {
			status.Time(func() {
				json.Unmarshal([]byte(perfCall(b, cs, "stand_status", map[string]any{"stand": name})), &v)
			})
			if v.Status != "running" {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if v.Status != "done" {
			raw, _ := json.MarshalIndent(v, "", "  ")
			b.Fatalf("stand %s ended %s:\n%s", name, v.Status, raw)
		}
		wall += v.Seconds
		for _, m := range v.Machines {
			sum += m.Seconds
		}
		b.StopTimer()
		perfCall(b, cs, "stand_destroy", map[string]any{"stand": name, "confirm": true})
		b.StartTimer()
	}
	b.ReportMetric(wall/float64(n), "wall-s")
	b.ReportMetric(sum/float64(n), "sum-s")
	b.ReportMetric(wall/sum, "wall/sum")
	status.Report(b, "status-")
}
