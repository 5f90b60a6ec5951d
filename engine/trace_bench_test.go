package engine

import (
	"testing"

	"github.com/poligon/poligon/internal/latency"
	"github.com/poligon/poligon/internal/testvm"
)

// BenchmarkTraceCost is what recording a call costs on the call's path, on
// a screen tool of each kind: ui_screenshot (its frame after is the one it
// took) and ui_key (its frame after is a glance off the path). The same
// server and VM answer with the recorder and without it, turn about.
// Target: <= 1 ms extra at p50.
func BenchmarkTraceCost(b *testing.B) {
	cfg := perfConfig(b, testvm.DataDir(b), b.TempDir())
	s := perfServer(b, cfg)
	cs := perfConnect(b, s, nil)
	vmid := perfBoot(b, cs, "tracecost")
	rec := s.app.Trace
	if rec == nil {
		b.Fatal("no recorder")
	}
	var on, off, keyOn, keyOff latency.Latencies
	shot := map[string]any{"vmid": vmid}
	key := map[string]any{"vmid": vmid, "key": "shift"}
	for i := 0; b.Loop(); i++ {
		s.app.Trace = nil
		off.Time(func() { perfCall(b, cs, "ui_screenshot", shot) })
		keyOff.Time(func() { perfCall(b, cs, "ui_key", key) })
		s.app.Trace = rec
		on.Time(func() { perfCall(b, cs, "ui_screenshot", shot) })
		keyOn.Time(func() { perfCall(b, cs, "ui_key", key) })
	}
	s.app.Trace = rec
	b.ReportMetric(on.Quantile(0.5)-off.Quantile(0.5), "shot-extra-p50-ms")
	b.ReportMetric(keyOn.Quantile(0.5)-keyOff.Quantile(0.5), "key-extra-p50-ms")
	b.ReportMetric(off.Quantile(0.5), "shot-p50-ms")
	b.ReportMetric(keyOff.Quantile(0.5), "key-p50-ms")
	b.ReportMetric(float64(rec.Stats().Dropped), "dropped")
}
