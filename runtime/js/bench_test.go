package js

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

var benchHost = runtime.HostFunc(func(_ context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"exit":0,"stdout":"Linux\n","stderr":""}`), nil
})

// reportPercentiles adds p50 and p99 of the per-iteration times.
func reportPercentiles(b *testing.B, times []time.Duration) {
	slices.Sort(times)
	if len(times) == 0 {
		return
	}
	b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkRunOneCall is the whole cost of running a script that makes one
// host call: fresh runtime, sandbox, prelude, module, run, JSON both ways.
func BenchmarkRunOneCall(b *testing.B) {
	m := mustLoad(b, script(`return vm.expect("uname -a");`))
	run := runtime.Run{Host: benchHost, Params: map[string]string{}, VMID: 1}
	var times []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := m.Run(context.Background(), run); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	reportPercentiles(b, times)
}

// BenchmarkBuiltinCall is the same call made by a built-in tool: the floor
// the script overhead is measured against.
func BenchmarkBuiltinCall(b *testing.B) {
	args, _ := json.Marshal(map[string]string{"command": "uname -a"})
	for b.Loop() {
		answer, err := benchHost.Call(context.Background(), "expect", args)
		if err != nil {
			b.Fatal(err)
		}
		var out struct{ Stdout string }
		if err := json.Unmarshal(answer, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHostCallInRun is the marginal cost of one more host call inside a run.
func BenchmarkHostCallInRun(b *testing.B) {
	m := mustLoad(b, script(`for (let i = 0; i < 1000; i++) vm.expect("uname -a");`))
	run := runtime.Run{Host: benchHost, Params: map[string]string{}, VMID: 1}
	for b.Loop() {
		if _, err := m.Run(context.Background(), run); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/call")
}

// BenchmarkNewSandbox is the setup a run takes ready-made from the pool:
// a runtime with the prelude, console and guards installed.
func BenchmarkNewSandbox(b *testing.B) {
	for b.Loop() {
		if _, err := newSandbox(); err != nil {
			b.Fatal(err)
		}
	}
}
