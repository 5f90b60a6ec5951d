package js

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

func limitError(t *testing.T, err, want error) *runtime.ScriptError {
	t.Helper()
	var se *runtime.ScriptError
	if !errors.As(err, &se) || !errors.Is(err, want) {
		t.Fatalf("err = %v, want a ScriptError wrapping %v", err, want)
	}
	return se
}

func TestInfiniteLoopStopsAtTimeLimit(t *testing.T) {
	m := mustLoad(t, script(`    let i = 0;
    while (true) { i++; }`))
	_, err := runWith(t, m, newFakeHost(), func(r *runtime.Run) { r.Limits.Timeout = time.Second })
	se := limitError(t, err, runtime.ErrTimeout)
	contains(t, err.Error(), "script time limit 1s reached (at t.js:6:")
	if se.Script != "scripts/t.js" {
		t.Fatalf("script = %q", se.Script)
	}
}

func TestManifestTimeout(t *testing.T) {
	m := mustLoad(t, `module.exports = {name: "slow", description: "d", timeout: 0.3, run() { for (;;) {} }};`)
	_, err := runWith(t, m, newFakeHost())
	limitError(t, err, runtime.ErrTimeout)
	contains(t, err.Error(), "script time limit 300ms reached (at t.js:1:")
}

func TestTimeLimitEndsBlockingHostCall(t *testing.T) {
	h := newFakeHost()
	h.block["run"] = true
	_, err := runWith(t, mustLoad(t, script(`vm.run("sleep 1000");`)), h, func(r *runtime.Run) { r.Limits.Timeout = 200 * time.Millisecond })
	limitError(t, err, runtime.ErrTimeout)
	contains(t, err.Error(), "(at t.js:5:7)")
}

func TestCancelDuringHostCall(t *testing.T) {
	entered := make(chan struct{})
	ended := make(chan error, 1)
	host := runtime.HostFunc(func(ctx context.Context, name string, _ json.RawMessage) (json.RawMessage, error) {
		if name == "log" {
			return json.RawMessage(`{}`), nil
		}
		close(entered)
		<-ctx.Done()
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	m := mustLoad(t, script(`    vm.log("start");
    try { vm.screen.waitChange({timeout: 600}); } catch (e) { vm.log("caught"); }
    for (;;) {}`))
	_, err := m.Run(ctx, runtime.Run{Host: host, Limits: runtime.Limits{Timeout: time.Minute}})
	se := limitError(t, err, runtime.ErrCancelled)
	if se.Message != "script cancelled" || se.Where != "t.js:6:31" {
		t.Fatalf("ScriptError = %+v", se)
	}
	if hostErr := <-ended; !errors.Is(hostErr, context.Canceled) {
		t.Fatalf("the host call's ctx ended with %v", hostErr)
	}
}

func TestMemoryBombEnds(t *testing.T) {
	m := mustLoad(t, script(`    const keep = [], mb = "x".repeat(1 << 20);
    for (let i = 0; ; i++) keep.push(mb + i);`))
	_, err := runWith(t, m, newFakeHost(), func(r *runtime.Run) {
		r.Limits = runtime.Limits{Timeout: time.Minute, MemoryMB: 64}
	})
	limitError(t, err, runtime.ErrMemory)
	contains(t, err.Error(), "script memory limit 64 MB reached (at t.js:6:")
}

// Garbage is not usage: a script that churns through far more than its
// ceiling while keeping little alive runs to its end.
func TestGarbageDoesNotTripMemoryLimit(t *testing.T) {
	m := mustLoad(t, script(`    const mb = "x".repeat(1 << 20);
    let n = 0;
    for (let i = 0; i < 400; i++) { const s = mb + i; n += s.length; }
    return n;`))
	res, err := runWith(t, m, newFakeHost(), func(r *runtime.Run) {
		r.Limits = runtime.Limits{Timeout: time.Minute, MemoryMB: 64}
	})
	if err != nil || string(res.Value) != "419431490" {
		t.Fatalf("answer %s, err %v", res.Value, err)
	}
}

func TestGuardsRefuseHugeBuiltins(t *testing.T) {
	res, err := runWith(t, mustLoad(t, script(`
    const out = [];
    for (const f of [() => "x".repeat(1e9), () => "x".padEnd(1e9), () => new Float64Array(1e9),
                     () => new ArrayBuffer(1e10), () => new Array(1e9), () => Array(1e9), () => Array.from({length: 1e9}),
                     () => { const a = []; a.length = 1e9; a.fill(0); }, () => { const a = []; a.length = 1e9; a.join(); }]) {
      try { f(); out.push("allowed"); } catch (e) { out.push(e.name); }
    }
    class List extends Array {}
    const l = new List(3);
    out.push([l.length, l instanceof List, [] instanceof Array, Array.isArray(l), new Uint8Array(4).length,
              "ab".repeat(3), Array.from("abc").join("")].join(" "));
    return out;`)), newFakeHost(), func(r *runtime.Run) { r.Limits.MemoryMB = 64 })
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "answer", string(res.Value), `["RangeError","RangeError","RangeError","RangeError","RangeError",
		"RangeError","RangeError","RangeError","RangeError","3 true true true 4 ababab abc"]`)
}

// A builtin goja cannot interrupt: Run answers anyway once the grace is over.
func TestStuckBuiltinIsAbandoned(t *testing.T) {
	defer func(d time.Duration) { stuckGrace = d }(stuckGrace)
	stuckGrace = time.Millisecond
	m := mustLoad(t, script(`    const a = []; a.length = 4e6;
    return a.lastIndexOf(1);`))
	_, err := runWith(t, m, newFakeHost(), func(r *runtime.Run) { r.Limits.Timeout = 20 * time.Millisecond })
	limitError(t, err, runtime.ErrTimeout)
	contains(t, err.Error(), "stuck in a builtin call and was abandoned")
}
