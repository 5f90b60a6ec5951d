package latency

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ds := Latencies{4 * time.Millisecond, 1 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond}
	if p50, max := ds.Quantile(0.5), ds.Quantile(1); p50 != 3 || max != 5 {
		t.Fatalf("p50 %v, max %v", p50, max)
	}
	if (Latencies{}).Quantile(0.5) != 0 {
		t.Fatal("no runs: want 0")
	}
}
