package engine

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/poligon/poligon/engine/stand"
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
	n := 0
	benchStand(b, "", func() any {
		n++
		return json.RawMessage(`{"name": "` + fmt.Sprintf("perf%d", n) + `", "machines": [
			{"role": "a", "template": "tiny", "steps": [{"exec": "echo a > /root/a"}, {"expect": {"command": "cat /root/a", "contains": "a"}}]},
			{"role": "b", "template": "tiny", "steps": [{"exec": "echo b > /root/b"}, {"expect": {"command": "cat /root/b", "contains": "b"}}]}]}`)
	})
}

// BenchmarkDebianStand builds debianStandPlan (a PostgreSQL machine and an
// application machine that queries it through {{ip.db}}, both debian) and
// reports the same figures: the application machine boots beside the
// database and waits only for its address and its row.
func BenchmarkDebianStand(b *testing.B) {
	n := 0
	benchStand(b, "debian", func() any {
		n++
		return debianStandPlan(fmt.Sprintf("perfdeb%d", n))
	})
}

// benchStand applies the plans next answers, one stand per iteration, on a
// data directory with the templates named, and reports wall, sum and the
// stand_status latency.
func benchStand(b *testing.B, templates string, next func() any) {
	var more []string
	if templates != "" {
		more = append(more, templates)
	}
	cfg := perfConfig(b, testvm.DataDir(b, more...), "")
	s := perfServer(b, cfg)
	cs := perfConnect(b, s, nil)
	var wall, sum float64
	var status latency.Latencies
	n := 0
	for b.Loop() {
		plan := next()
		raw, _ := json.Marshal(plan)
		var named struct{ Name string }
		json.Unmarshal(raw, &named)
		name := named.Name
		n++
		perfCall(b, cs, "stand_apply", map[string]any{"plan": plan})
		var v stand.View
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
