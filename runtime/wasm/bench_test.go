package wasm

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

// BenchmarkRun measures one run of the uname example (one host call) on a
// module already compiled: instantiation, Go runtime start, the call.
func BenchmarkRun(b *testing.B) {
	m := loadGuest(b, "uname")
	host := newFakeHost()
	host.answer("expect", `{"exit":0,"stdout":"Linux\n"}`)
	run := runtime.Run{Host: host, Params: map[string]string{"flags": "-a"}}
	var took []time.Duration
	for b.Loop() {
		began := time.Now()
		if _, err := m.Run(context.Background(), run); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(began))
		host.calls = host.calls[:0]
	}
	reportPercentiles(b, took)
}

// BenchmarkLoad measures Load in a fresh engine, as at a restart: compiling
// into an empty disk cache, and reading compiled code from a warm one.
func BenchmarkLoad(b *testing.B) {
	wasm := guestWasm(b, "uname")
	load := func(b *testing.B, dir string) {
		e, err := NewEngine(context.Background(), Options{CacheDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close(context.Background())
		if _, err := e.Load(context.Background(), "uname.wasm", wasm); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			dir, err := os.MkdirTemp("", "poligon-wasm-cache-")
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			load(b, dir)
			b.StopTimer()
			os.RemoveAll(dir)
			b.StartTimer()
		}
	})
	b.Run("warm", func(b *testing.B) {
		dir := b.TempDir()
		load(b, dir) // fills the cache
		for b.Loop() {
			load(b, dir)
		}
	})
}

func reportPercentiles(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	ms := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.9), "p90-ms")
}
