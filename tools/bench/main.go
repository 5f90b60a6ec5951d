// Command bench runs poligon's performance benchmarks (go test -bench, one
// run each, with fixed iteration counts) and prints every figure against
// the target its issue set, PASS or MISS, with the ratios measured in the
// same run. It is a report: a MISS does not fail it; a benchmark that
// fails (or cannot be built) does, after the table is printed.
//
//	go run ./tools/bench              # everything: about 4 minutes on 2 cores under TCG, and 3 more for the OCR corpus
//	go run ./tools/bench -only engine # the runs whose package or benchmark matches
//
// Run it anywhere inside the module. The go test output streams to stderr;
// the table goes to stdout.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/poligon/poligon/backends/qemu"
)

// run is one `go test -bench` invocation. Iteration counts are fixed so a
// run's length does not depend on the machine's speed: VM benchmarks boot
// their VMs once per run (they use b.Loop).
type run struct {
	pkg, bench, times string
}

var runs = []run{
	{"./backends/qemu", "BenchmarkScreenshot", "100x"},
	{"./backends/qemu", "BenchmarkTyping", "3x"},
	{"./backends/qemu", "BenchmarkLinkedCloneToAgent", "3x"},
	{"./engine", "BenchmarkToolCallHTTP", "2000x"},
	{"./engine", "BenchmarkTinyVM", "100x"},
	{"./engine", "BenchmarkHotReload", "20x"},
	{"./engine", "BenchmarkConsoleShare", "5x"},
	{"./engine", "BenchmarkStand", "1x"},
	{"./engine", "BenchmarkDebianStand", "1x"},
	{"./engine", "BenchmarkDesktopLogin", "1x"},
	{"./engine/stand", "BenchmarkCompile", "200x"},
	{"./backends/ocr", "BenchmarkTinyXFrame", "5x"},
	{"./backends/ocr", "BenchmarkXFCEFrame", "5x"},
	{"./backends/ocr", "BenchmarkCorpus", "3x"},
	{"./hostapi", "BenchmarkSee", "200x"},
	{"./backends/bmc", "BenchmarkPowerResetToAgent", "3x"},
	{"./backends/pikvm", "BenchmarkKVMType", "1x"},
	{"./backends/pikvm", "BenchmarkKVMScreenshot", "20x"},
	{"./internal/dataset", "BenchmarkExport", "1x"},
	{"./engine", "BenchmarkTraceCost", "30x"},
	{"./internal/trace", "BenchmarkRecord", "2000x"},
	{"./web", "BenchmarkConsoleLatency", "40x"},
	{"./web", "BenchmarkWatchers", "1x"},
	{"./engine", "BenchmarkDatasetCapture", "5x"},
}

// figure is one line of the report: a metric a benchmark reported, how to
// show it, its target (none: reported only) and the metrics shown beside it.
type figure struct {
	label  string
	bench  string // as go test names it, without the -GOMAXPROCS suffix
	metric string
	unit   string // appended to the value
	target target
	detail []string
}

// target is a bound on a figure: op is "<=", ">=" or "==".
type target struct {
	op    string
	value float64
}

func (t target) String() string {
	if t.op == "" {
		return "-"
	}
	return fmt.Sprintf("%s %s", t.op, num(t.value))
}

func (t target) met(v float64) bool {
	switch t.op {
	case "<=":
		return v <= t.value
	case ">=":
		return v >= t.value
	case "==":
		return v == t.value
	}
	return true
}

var figures = []figure{
	{"screenshot: RFB frame+PNG / QMP screendump, p50", "BenchmarkScreenshot", "ratio", "x", target{"<=", 0.5},
		[]string{"ours-p50-ms", "qmp-p50-ms", "qmp-raw-p50-ms", "ratio-raw"}},
	{"typing a-z0-9 and space: intact chars/s", "BenchmarkTyping/lower", "chars/s", "/s", target{">=", 50}, nil},
	{"typing a-z0-9 and space: chars lost", "BenchmarkTyping/lower", "lost-chars", "", target{"==", 0}, nil},
	{"typing all printable ASCII: intact chars/s", "BenchmarkTyping/printable", "chars/s", "/s", target{">=", 50}, nil},
	{"typing all printable ASCII: chars lost", "BenchmarkTyping/printable", "lost-chars", "", target{"==", 0}, nil},
	{"linked clone of tiny to guest agent (TCG), p50", "BenchmarkLinkedCloneToAgent", "p50-s", " s", target{"<=", 10},
		[]string{"max-s", "clone-p50-s", "start-p50-s", "boot-p50-s"}},
	{"vm_list_my_vms over HTTP: calls/s", "BenchmarkToolCallHTTP", "calls/s", "/s", target{}, nil},
	{"vm_list_my_vms over HTTP: p50", "BenchmarkToolCallHTTP", "p50-ms", " ms", target{}, nil},
	{"vm_list_my_vms over HTTP: p99", "BenchmarkToolCallHTTP", "p99-ms", " ms", target{}, nil},
	{"ui_screenshot via MCP / backend Frame+PNG, p50", "BenchmarkTinyVM/screenshot", "ratio", "x", target{},
		[]string{"mcp-p50-ms", "backend-p50-ms", "mcp-p99-ms", "backend-p99-ms"}},
	{"JS script tool: extra over the built-in, p50", "BenchmarkTinyVM/script", "js-extra-p50-ms", " ms", target{"<=", 1},
		[]string{"js-p50-ms", "builtin-p50-ms", "js-p99-ms", "builtin-p99-ms"}},
	{"Wasm script tool: extra over the built-in, p50", "BenchmarkTinyVM/script", "wasm-extra-p50-ms", " ms", target{"<=", 5},
		[]string{"wasm-p50-ms", "builtin-p50-ms", "wasm-p99-ms"}},
	{"ui_type (50 chars): a second poligon process's turn, extra p50", "BenchmarkConsoleShare", "switch-extra-p50-ms", " ms", target{"<=", 200},
		[]string{"alone-p50-ms"}},
	{"ui_type: first call while a foreign client holds QMP, extra p50", "BenchmarkConsoleShare", "held-first-extra-p50-ms", " ms", target{"<=", 300}, nil},
	{"ui_type: later calls while QMP is held, extra p50", "BenchmarkConsoleShare", "held-next-extra-p50-ms", " ms", target{"<=", 50}, nil},
	{"vm_exec: a second poligon process's turn, extra p50", "BenchmarkConsoleShare", "exec-switch-extra-p50-ms", " ms", target{},
		[]string{"exec-alone-p50-ms"}},
	{"stand of 2 independent tiny machines: wall / sum of their builds", "BenchmarkStand", "wall/sum", "x", target{"<=", 0.6},
		[]string{"wall-s", "sum-s"}},
	{"stand of 2 debian machines (PostgreSQL + app): wall / sum of their builds", "BenchmarkDebianStand", "wall/sum", "x", target{},
		[]string{"wall-s", "sum-s"}},
	{"stand_status during a build, p99", "BenchmarkStand", "status-p99-ms", " ms", target{"<=", 50}, []string{"status-p50-ms"}},
	{"stand plan (4 machines) to script: compile", "BenchmarkCompile", "ms/op", " ms", target{"<=", 10}, nil},
	{"hot reload: file write to list_changed, p99", "BenchmarkHotReload", "p99-ms", " ms", target{"<=", 250},
		[]string{"p50-ms", "max-ms"}},
	{"ui_read, a tiny-x frame full of text: cold p50", "BenchmarkTinyXFrame", "cold-p50-ms", " ms", target{"<=", 250},
		[]string{"lines", "cli-p50-ms"}},
	{"ui_read cold / tesseract CLI (same PNG, languages)", "BenchmarkTinyXFrame", "ratio", "x", target{"<=", 0.5}, nil},
	{"ui_read, one line changed: p50", "BenchmarkTinyXFrame", "warm-p50-ms", " ms", target{"<=", 10}, nil},
	{"ui_read word recall, English", "BenchmarkTinyXFrame", "recall-en", "", target{">=", 0.98}, []string{"cli-recall-en"}},
	{"ui_read word recall, Russian", "BenchmarkTinyXFrame", "recall-ru", "", target{">=", 0.98}, []string{"cli-recall-ru"}},
	{"debian-desktop: vm_start to the XFCE desktop drawn (linked clone, TCG)", "BenchmarkDesktopLogin", "desktop-s", " s", target{},
		[]string{"agent-s", "greeter-s", "login-s"}},
	{"ui_read, an XFCE frame (debian-desktop): cold p50", "BenchmarkXFCEFrame", "cold-p50-ms", " ms", target{},
		[]string{"lines", "cli-p50-ms", "ratio"}},
	{"ui_read, XFCE, one line changed: p50", "BenchmarkXFCEFrame", "warm-p50-ms", " ms", target{}, nil},
	{"ui_read word recall on XFCE, English", "BenchmarkXFCEFrame", "recall-en", "", target{">=", 0.95}, []string{"cli-recall-en"}},
	{"ui_read word recall on XFCE, Russian", "BenchmarkXFCEFrame", "recall-ru", "", target{">=", 0.95}, []string{"cli-recall-ru"}},
	{"OCR corpus: words read with a letter of the other script", "BenchmarkCorpus/all", "cross", "", target{"==", 0},
		[]string{"cli-cross", "best-cross"}},
	{"OCR corpus: character accuracy, monospace text", "BenchmarkCorpus/all", "mono-chars", "", target{">=", 0.999},
		[]string{"chars", "cli-chars", "best-chars"}},
	{"OCR corpus: word recall, proportional text (GTK)", "BenchmarkCorpus/all", "prop-words", "", target{">=", 0.98}, nil},
	{"ui_read, VGA console 720x400 (tiny, dmesg): cold p50", "BenchmarkCorpus/tiny-dmesg", "cold-p50-ms", " ms", target{"<=", 20},
		corpusDetail},
	{"ui_read cold / tesseract CLI best, VGA dmesg", "BenchmarkCorpus/tiny-dmesg", "ratio", "x", target{"<=", 0.1}, nil},
	{"ui_read, tiny-x four xterms (~8.6k chars): cold p50", "BenchmarkCorpus/tinyx-xterms", "cold-p50-ms", " ms", target{"<=", 250},
		corpusDetail},
	{"ui_read, tiny-x four xterms, one line changed: p50", "BenchmarkCorpus/tinyx-xterms", "warm-p50-ms", " ms", target{"<=", 10}, nil},
	{"ui_read cold / tesseract CLI best, tiny-x xterms", "BenchmarkCorpus/tinyx-xterms", "ratio", "x", target{"<=", 0.1}, nil},
	{"ui_read corpus tiny-shell (make demo's screen): cold p50", "BenchmarkCorpus/tiny-shell", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus tiny-bootlog: cold p50", "BenchmarkCorpus/tiny-bootlog", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus tiny-dialog: cold p50", "BenchmarkCorpus/tiny-dialog", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus tinyx-scripts (Latin, Cyrillic, mixed): cold p50", "BenchmarkCorpus/tinyx-scripts", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus tinyx-menu (twm's menu): cold p50", "BenchmarkCorpus/tinyx-menu", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus debian-login (Linux console): cold p50", "BenchmarkCorpus/debian-login", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus debian-shell (Linux console): cold p50", "BenchmarkCorpus/debian-shell", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus xfce-terminal (DejaVu Sans Mono): cold p50", "BenchmarkCorpus/xfce-terminal", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read corpus gtk-form (GTK, DejaVu Sans): cold p50", "BenchmarkCorpus/gtk-form", "cold-p50-ms", " ms", target{}, corpusDetail},
	{"ui_read cold / tesseract CLI best, GTK form", "BenchmarkCorpus/gtk-form", "ratio", "x", target{}, nil},
	{"ui_see from the frame cache, p50", "BenchmarkSee", "cached-p50-ms", " ms", target{"<=", 5}, nil},
	{"ui_see uncached, over the model call, p50", "BenchmarkSee", "overhead-p50-ms", " ms", target{"<=", 30}, nil},
	{"ui_click_label through OCR, end to end, p50", "BenchmarkTinyVM/click_label", "p50-ms", " ms", target{},
		[]string{"p99-ms"}},
	{"bench_power reset to the guest agent, Redfish fake (MegaRAC)", "BenchmarkPowerResetToAgent/megarac", "s/reset-to-agent", " s", target{},
		[]string{"ms/reset-call"}},
	{"typing through the kvmd fake: intact chars/s", "BenchmarkKVMType/default-12ms", "intact-chars/s", "/s", target{">=", 30}, nil},
	{"typing through the kvmd fake: chars lost", "BenchmarkKVMType/default-12ms", "lost-chars/op", "", target{"==", 0}, nil},
	{"PiKVM screenshot (frame + PNG) / raw snapshot GET", "BenchmarkKVMScreenshot/static", "frame+png/get", "x", target{"<=", 1.2},
		[]string{"frame/get", "get-ms", "frame+png-ms"}},
	{"dataset export, 2000 synthetic 1280x800 frames with sidecars: frames/s", "BenchmarkExport", "frames/s", "/s", target{}, nil},
	{"trace: ui_screenshot's extra p50 with the recorder on", "BenchmarkTraceCost", "shot-extra-p50-ms", " ms", target{"<=", 1},
		[]string{"shot-p50-ms"}},
	{"trace: ui_key's extra p50 with the recorder on (its frame after is a glance)", "BenchmarkTraceCost", "key-extra-p50-ms", " ms", target{"<=", 1},
		[]string{"key-p50-ms", "dropped"}},
	{"trace: Record's cost on the call's path (two 1280x800 frames)", "BenchmarkRecord", "ns/op", " ns", target{"<=", 1e6}, nil},
	{"live view: a key on the console to its echo on the browser's canvas, p50", "BenchmarkConsoleLatency", "p50-ms", " ms", target{"<=", 150},
		[]string{"vnc-p50-ms", "feed-p50-ms"}},
	{"live view: a key on the console to its echo on the browser's canvas, p95", "BenchmarkConsoleLatency", "p95-ms", " ms", target{"<=", 150},
		[]string{"vnc-p95-ms", "feed-p95-ms"}},
	{"ui_screenshot p50 with 5 browsers watching / none", "BenchmarkWatchers", "shot-ratio", "x", target{"<=", 1.1},
		[]string{"shot-p50-ms-alone", "shot-p50-ms-5-watching"}},
	{"ui_type chars/s with 5 browsers watching / none", "BenchmarkWatchers", "type-ratio", "x", target{">=", 0.9},
		[]string{"type-chars/s-alone", "type-chars/s-5-watching", "frames-per-watcher"}},
	{"ui_click screenshot=true on XFCE: what dataset capture adds, p50", "BenchmarkDatasetCapture", "extra-p50-ms", " ms", target{},
		[]string{"off-p50-ms", "on-p50-ms", "ratio"}},
}

// corpusDetail is what a corpus frame's row shows beside its cold read.
var corpusDetail = []string{"warm-p50-ms", "chars", "words", "cross", "best-p50-ms", "best-chars", "best-words", "best-cross", "cli-p50-ms", "cli-chars", "ratio"}

func main() {
	only := flag.String("only", "", "run only the benchmarks whose package or name matches this regexp")
	flag.Parse()
	var filter *regexp.Regexp
	if *only != "" {
		var err error
		if filter, err = regexp.Compile(*only); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -only: %v\n", err)
			os.Exit(2)
		}
	}

	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	acc := accel() // before the clock starts: the KVM probe may take 3 s
	began := time.Now()
	res := results{}
	skips := map[string]string{}
	var failed []string
	ran := map[string]bool{}
	for _, r := range runs {
		if filter != nil && !filter.MatchString(r.pkg+" "+r.bench) {
			continue
		}
		ran[r.bench] = true
		out, err := goTestBench(root, r)
		parseBenchOutput(out, res)
		for name, why := range skipped(out) {
			skips[name] = why
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s %s: %v", r.pkg, r.bench, err))
		}
	}

	fmt.Printf("\npoligon benchmarks: %s, %d CPUs, %s, %s, load %s; took %s\n\n",
		runtime.Version(), runtime.NumCPU(), acc, time.Now().Format("2006-01-02 15:04"), loadAverage(), time.Since(began).Round(time.Second))
	printTable(os.Stdout, res, skips, ran)
	if len(failed) > 0 {
		fmt.Println("\nbenchmarks that failed:")
		for _, f := range failed {
			fmt.Println("  " + f)
		}
		os.Exit(1)
	}
}

// goTestBench runs one benchmark, streaming its output to stderr, and
// answers the output. -v shows why a benchmark skipped and what its logs
// say (a damaged typed line, for one).
func goTestBench(root string, r run) (string, error) {
	args := []string{"test", "-v", "-run", "^$", "-bench", "^" + r.bench + "$", "-benchtime", r.times, "-count", "1", "-timeout", "20m", r.pkg}
	fmt.Fprintf(os.Stderr, "\n$ go %s\n", strings.Join(args, " "))
	var buf bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Stdout = io.MultiWriter(os.Stderr, &buf)
	cmd.Stderr = io.MultiWriter(os.Stderr, &buf)
	err := cmd.Run()
	return buf.String(), err
}

func printTable(w io.Writer, res results, skips map[string]string, ran map[string]bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmeasured\ttarget\tresult\tdetail")
	misses := 0
	for _, f := range figures {
		top, _, _ := strings.Cut(f.bench, "/")
		if !ran[top] {
			continue
		}
		m, ok := res[f.bench]
		v, have := m[f.metric]
		switch {
		case !ok || !have:
			why := "no result (failed?)"
			if reason, skip := skipReason(skips, f.bench); skip {
				why = "skipped: " + reason
			}
			fmt.Fprintf(tw, "%s\t-\t%s\t-\t%s\n", f.label, f.target, why)
			continue
		}
		result := "-"
		if f.target.op != "" {
			result = "PASS"
			if !f.target.met(v) {
				result = "MISS"
				misses++
			}
		}
		var detail []string
		for _, d := range f.detail {
			if dv, ok := m[d]; ok {
				detail = append(detail, d+"="+num(dv))
			}
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%s\t%s\t%s\n", f.label, num(v), f.unit, f.target, result, strings.Join(detail, " "))
	}
	tw.Flush()
	if misses > 0 {
		fmt.Fprintf(w, "\n%d target(s) missed (a report, not a failure)\n", misses)
	}
}

// skipReason finds why a benchmark (or its parent) was skipped.
func skipReason(skips map[string]string, bench string) (string, bool) {
	for name := bench; name != ""; {
		if why, ok := skips[name]; ok {
			return why, true
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			break
		}
		name = name[:i]
	}
	return "", false
}

// num prints a figure with three significant digits at most (whole
// numbers as they are).
func num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e6:
		return fmt.Sprintf("%.0f", v)
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1 || v <= -1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// moduleRoot answers the directory of the go.mod in use, so the packages'
// relative paths resolve wherever the command runs inside the module.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("run inside the poligon module (go env GOMOD = %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod), nil
}

// accel says whether VMs here run with KVM or TCG (emulation), and why:
// the benchmarks' drivers ask for auto, so they get what the KVM probe
// decides here.
func accel() string {
	a, err := qemu.ResolveAccel("", qemu.AccelAuto)
	if err != nil {
		return "accel unknown: " + err.Error()
	}
	return "accel " + a.String()
}

// loadAverage is the 1-minute load when the run ended: shared machines are
// noisy, and a figure read with the load beside it reads better.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
