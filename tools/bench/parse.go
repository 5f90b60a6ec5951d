package main

import (
	"bufio"
	"regexp"
	"strconv"
	"strings"
)

// results holds the metrics of each benchmark run: name (without the
// -GOMAXPROCS suffix) -> unit -> value.
type results map[string]map[string]float64

// procsSuffix is the -N that go test appends to a benchmark's name when
// GOMAXPROCS is not 1.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// parseBenchOutput reads the result lines of `go test -bench` output:
//
//	BenchmarkTinyVM/screenshot-2   30   13555637 ns/op   3.014 backend-p50-ms ...
//
// Other lines (logs, PASS, ok) are skipped.
func parseBenchOutput(out string, into results) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // not a result line (a log line that starts with Benchmark)
		}
		name := procsSuffix.ReplaceAllString(f[0], "")
		m := into[name]
		if m == nil {
			m = map[string]float64{}
			into[name] = m
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				m[f[i+1]] = v
			}
		}
	}
}

// skipped answers the benchmarks a `go test -v -bench` output says were
// skipped, with the reason: the log line just above "--- SKIP: <name>".
func skipped(out string) map[string]string {
	why := map[string]string{}
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- SKIP: ")
		if !ok || name == "" {
			continue
		}
		reason := ""
		if i > 0 {
			reason = strings.TrimSpace(lines[i-1])
			if loc, msg, ok := strings.Cut(reason, ": "); ok && strings.Contains(loc, ".go:") {
				reason = msg
			}
		}
		why[procsSuffix.ReplaceAllString(strings.Fields(name)[0], "")] = reason
	}
	return why
}
