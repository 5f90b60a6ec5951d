// Package latency collects the durations of repeated operations for the
// benchmarks, and reports their percentiles.
package latency

import (
	"slices"
	"testing"
	"time"
)

// Latencies are the durations of an operation, one per run.
type Latencies []time.Duration

// Time runs op and records how long it took.
func (ds *Latencies) Time(op func()) {
	began := time.Now()
	op()
	*ds = append(*ds, time.Since(began))
}

// Quantile answers the q-quantile in milliseconds (nearest rank).
func (ds Latencies) Quantile(q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(q*float64(len(s)-1)+0.5)]) / float64(time.Millisecond)
}

// Report reports the p50 and p99 of b's runs, named prefix+"p50-ms".
func (ds Latencies) Report(b *testing.B, prefix string) {
	b.ReportMetric(ds.Quantile(0.5), prefix+"p50-ms")
	b.ReportMetric(ds.Quantile(0.99), prefix+"p99-ms")
}
