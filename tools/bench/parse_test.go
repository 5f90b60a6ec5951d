package main

import "testing"

// A `go test -v -bench` output of two packages, with a skip and a log line.
const sampleOutput = `goos: linux
goarch: amd64
pkg: github.com/poligon/poligon/backends/qemu
cpu: Oxide Virtual Turin-like Processor
BenchmarkScreenshot
BenchmarkScreenshot-2   	      20	  44639143 ns/op	         7.588 ours-p50-ms	        18.72 qmp-p50-ms	         0.4054 ratio
BenchmarkTyping
BenchmarkTyping/lower
    bench_test.go:120: typed "abc"
        the guest wrote "ab"
BenchmarkTyping/lower-2         	       2	6088443319 ns/op	        38.93 chars/s	         0 lost-chars
BenchmarkCloneToAgent
    bench_test.go:32: qemu-system-x86_64 not installed (apt-get install qemu-system-x86 qemu-utils): skipping a test that boots a VM
--- SKIP: BenchmarkCloneToAgent
PASS
ok  	github.com/poligon/poligon/backends/qemu	12.011s
BenchmarkHotReload-16      	      20	 120841806 ns/op	       119.4 max-ms
`

func TestParseBenchOutput(t *testing.T) {
	res := results{}
	parseBenchOutput(sampleOutput, res)
	want := map[string]map[string]float64{
		"BenchmarkScreenshot":   {"ns/op": 44639143, "ours-p50-ms": 7.588, "qmp-p50-ms": 18.72, "ratio": 0.4054},
		"BenchmarkTyping/lower": {"ns/op": 6088443319, "chars/s": 38.93, "lost-chars": 0},
		"BenchmarkHotReload":    {"ns/op": 120841806, "max-ms": 119.4},
	}
	if len(res) != len(want) {
		t.Fatalf("parsed %d benchmarks, want %d: %v", len(res), len(want), res)
	}
	for name, metrics := range want {
		for unit, v := range metrics {
			if got, ok := res[name][unit]; !ok || got != v {
				t.Errorf("%s %s = %v (present %v), want %v", name, unit, got, ok, v)
			}
		}
	}
}

func TestSkipped(t *testing.T) {
	got := skipped(sampleOutput)
	want := "qemu-system-x86_64 not installed (apt-get install qemu-system-x86 qemu-utils): skipping a test that boots a VM"
	if len(got) != 1 || got["BenchmarkCloneToAgent"] != want {
		t.Fatalf("skipped = %q", got)
	}
	if why, ok := skipReason(got, "BenchmarkCloneToAgent/sub"); !ok || why != want {
		t.Fatalf("skipReason of a sub-benchmark = %q, %v", why, ok)
	}
}

func TestTargets(t *testing.T) {
	for _, c := range []struct {
		t    target
		v    float64
		want bool
	}{
		{target{"<=", 0.5}, 0.5, true}, {target{"<=", 0.5}, 0.51, false},
		{target{">=", 50}, 49.9, false}, {target{">=", 50}, 50, true},
		{target{"==", 0}, 0, true}, {target{"==", 0}, 1, false},
		{target{}, 123, true},
	} {
		if got := c.t.met(c.v); got != c.want {
			t.Errorf("%s met by %v = %v, want %v", c.t, c.v, got, c.want)
		}
	}
}
