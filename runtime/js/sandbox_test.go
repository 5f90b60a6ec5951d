package js

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

// scripts is a Resolver over an in-memory directory that records what it
// was asked for.
type scripts struct {
	mu    sync.Mutex
	files map[string]string
	asked []string
}

func (s *scripts) resolve(name string) ([]byte, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, name)
	src, ok := s.files[name]
	if !ok {
		return nil, "", fmt.Errorf("no script or recipe named %s", name)
	}
	return []byte(src), "recipes/" + name + ".js", nil
}

func TestRequireRefusals(t *testing.T) {
	lib := &scripts{files: map[string]string{}}
	for spec, want := range map[string]string{
		"fs":             `require("fs"): Node.js modules are not available in the sandbox; require takes a stdlib module (poligon/text) or another script or recipe by name`,
		"child_process":  `require("child_process"): Node.js modules are not available in the sandbox`,
		"node:fs":        `require("node:fs"): Node.js modules are not available`,
		"/etc/passwd":    `require("/etc/passwd"): files cannot be required, only modules by name`,
		"../secrets":     `require("../secrets"): files cannot be required`,
		"./lib/x.js":     `require("./lib/x.js"): files cannot be required`,
		"C:\\x":          `files cannot be required`,
		"poligon/nosuch": `require("poligon/nosuch"): there is no stdlib module poligon/nosuch`,
		"nosuch":         `require("nosuch"): no script or recipe named nosuch`,
	} {
		res, err := runWith(t, mustLoad(t, script(fmt.Sprintf(`try { require(%q); } catch (e) { return e.message; }`, spec)),
			Options{Resolve: lib.resolve}), newFakeHost())
		if err != nil {
			t.Fatal(err)
		}
		var message string
		if err := json.Unmarshal(res.Value, &message); err != nil {
			t.Fatalf("%s: %s", spec, res.Value)
		}
		contains(t, message, want)
	}
	if !reflect.DeepEqual(lib.asked, []string{"nosuch"}) {
		t.Fatalf("the resolver was asked for %q; only bare names may reach it", lib.asked)
	}
	_, err := runWith(t, mustLoad(t, script(`require("helper");`)), newFakeHost())
	contains(t, err.Error(), `require("helper"): no other scripts are available here`)
}

func TestRequireScriptsAndStdlib(t *testing.T) {
	lib := &scripts{files: map[string]string{
		"helper": `const text = require("poligon/text");
let loads = (globalThis.__loads || 0) + 1; globalThis.__loads = loads;
module.exports = { users(vm) { return text.lines(vm.expect("cut -d: -f1 /etc/passwd")); }, loads };`,
		"broken": "module.exports = {};\n\nnull.crash;",
	}}
	m := mustLoad(t, script(`
    const a = require("helper"), b = require("./helper.js"), text = require("poligon/text");
    let brokenAt = "";
    try { require("broken"); } catch (e) { brokenAt = e.stack; }
    return {same: a === b, loads: a.loads, users: a.users(vm),
            fields: text.fields("  a  b c "), grep: text.grep("ab\ncd\nabc", /^ab/),
            kv: text.keyValues('# os\nID=debian\nNAME="Debian GNU"\n'), brokenAt: brokenAt.includes("broken.js:3")};`),
		Options{Resolve: lib.resolve})
	h := newFakeHost()
	h.answers["expect"] = `{"exit":0,"stdout":"root\nbob\n","stderr":""}`
	res, err := runWith(t, m, h)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "answer", string(res.Value), `{"same":true,"loads":1,"users":["root","bob"],"fields":["a","b","c"],
		"grep":["ab","abc"],"kv":{"ID":"debian","NAME":"Debian GNU"},"brokenAt":true}`)
	// The compiled helper is reused by the next run, which still evaluates it afresh.
	if res, err = runWith(t, m, h); err != nil || !strings.Contains(string(res.Value), `"loads":1`) {
		t.Fatalf("second run: %s %v", res.Value, err)
	}
}

func TestNoHostEscapes(t *testing.T) {
	res, err := runWith(t, mustLoad(t, script(`
    const g = globalThis.constructor.constructor("return this")();
    let fnProcess;
    try { fnProcess = Function("return process")(); } catch (e) { fnProcess = e.name; }
    const names = Object.getOwnPropertyNames(g).filter(n => !/^[A-Z]/.test(n) || n === "PoligonError").sort();
    return {
      same: g === globalThis, process: typeof process, fnProcess,
      timers: [typeof setTimeout, typeof setInterval, typeof setImmediate, typeof queueMicrotask],
      requireGlobal: typeof g.require, hostCall: Object.getOwnPropertyNames(vm).filter(n => n.startsWith("_")),
      names,
      evalSourceMap: eval("41 + 1\n//# sourceMappingURL=/dev/zero"),
    };`)), newFakeHost(), func(r *runtime.Run) { r.Limits.Timeout = 5 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "answer", string(res.Value), `{"same":true,"process":"undefined","fnProcess":"ReferenceError",
		"timers":["undefined","undefined","undefined","undefined"],"requireGlobal":"undefined","hostCall":[],
		"names":["PoligonError","console","decodeURI","decodeURIComponent","encodeURI","encodeURIComponent","escape",
		"eval","globalThis","isFinite","isNaN","parseFloat","parseInt","undefined","unescape"],
		"evalSourceMap":42}`)
}

// The API objects are frozen, and what a script does to the builtins does
// not change what the host is asked.
func TestPrototypePollution(t *testing.T) {
	h := newFakeHost()
	res, err := runWith(t, mustLoad(t, script(`
    "use strict";
    const tries = [];
    for (const f of [() => { vm.exec = () => "fake"; }, () => { vm.screen.shot = null; }, () => { vm.vmid = 1; },
                     () => { PoligonError.prototype.hint = "x"; }, () => { Object.getPrototypeOf(vm.file).x = 1; }]) {
      try { f(); tries.push("allowed"); } catch (e) { tries.push(e.name); }
    }
    Object.prototype.timeout = 999;
    Object.prototype.toJSON = function () { return {command: "rm -rf /"}; };
    JSON.stringify = () => '{"command":"rm -rf /"}';
    Array.prototype.indexOf = () => 0;
    vm.exec("ls");
    delete Object.prototype.toJSON;
    return {tries, frozen: [vm, vm.file, vm.screen, vm.keyboard, vm.mouse, vm.power, vm.evidence, console].every(Object.isFrozen)};`)), h)
	if err != nil {
		t.Fatal(err)
	}
	// Object.prototype is the script's own to change (a fresh runtime per run).
	sameJSON(t, "answer", string(res.Value), `{"tries":["TypeError","TypeError","TypeError","TypeError","allowed"],"frozen":true}`)
	if got := h.recorded(); len(got) != 1 || got[0].Args != `{"command":"ls"}` {
		t.Fatalf("host saw %+v, want exec {\"command\":\"ls\"}", got)
	}
	// And nothing leaks into the next run.
	res, err = runWith(t, mustLoad(t, script(`return [({}).timeout, typeof Object.prototype.toJSON];`)), h)
	if err != nil || string(res.Value) != `[null,"undefined"]` {
		t.Fatalf("next run sees %s %v", res.Value, err)
	}
}

// Setters a module puts on Object.prototype before its run neither see
// nor change the vm the run gets or the arguments its verbs send.
func TestPrototypeSettersSeeNoVerbs(t *testing.T) {
	h := newFakeHost()
	res, err := runWith(t, mustLoad(t, `
const seen = [];
const trap = (key) => Object.defineProperty(Object.prototype, key,
  { set(v) { seen.push(key); }, get() { return "stolen"; }, configurable: true });
["exec", "screen", "shot", "vmid"].forEach(trap); // before the run's vm is made
module.exports = { name: "t", description: "d", run(vm) {
  ["command", "timeout"].forEach(trap);
  vm.exec("ls", { timeout: 5 });
  vm.screen.shot();
  return { seen, vmid: vm.vmid, exec: typeof vm.exec };
} };
`), h)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "answer", string(res.Value), `{"seen":[],"vmid":101,"exec":"function"}`)
	if got := h.recorded(); len(got) != 2 || got[0].Args != `{"command":"ls","timeout":5}` || got[1].Name != "screen.shot" {
		t.Fatalf("host saw %+v", got)
	}
}

func TestDeterminism(t *testing.T) {
	m := mustLoad(t, script(`
    const d = new Date();
    vm.exec("echo " + Math.random() + " " + Math.random());
    vm.exec("date -s @" + Date.now() / 1000 + " " + d.toISOString() + " " + (Date.now() === d.getTime()));
    return Math.floor(Math.random() * 1e6);`))
	run := func(seed int64) ([]call, string) {
		h := newFakeHost()
		res, err := runWith(t, m, h, func(r *runtime.Run) { r.Seed = seed })
		if err != nil {
			t.Fatal(err)
		}
		return h.recorded(), string(res.Value)
	}
	calls1, v1 := run(7)
	calls2, v2 := run(7)
	calls3, _ := run(8)
	if !reflect.DeepEqual(calls1, calls2) || v1 != v2 {
		t.Fatalf("same seed, different runs:\n%v %s\n%v %s", calls1, v1, calls2, v2)
	}
	if calls1[0] == calls3[0] {
		t.Fatalf("seeds 7 and 8 give the same randomness: %v", calls1[0])
	}
	if calls1[1] != calls3[1] || calls1[1].Args != `{"command":"date -s @1772366400 2026-03-01T12:00:00.000Z true"}` {
		t.Fatalf("the clock is not the run's: %v / %v", calls1[1], calls3[1])
	}
}

// console goes to the run's log, never to stdout (stdio MCP lives there).
func TestConsoleGoesToLog(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	var lines []string
	_, runErr := runWith(t, mustLoad(t, script(`
    console.log("hello", {a: 1}, 3, [1, "x"]);
    console.info("info"); console.debug("debug");
    console.warn("careful"); console.error(new TypeError("bad"));`)), newFakeHost(),
		func(r *runtime.Run) { r.Log = func(s string) { lines = append(lines, s) } })
	os.Stdout = stdout
	w.Close()
	leaked, _ := io.ReadAll(r)
	if runErr != nil {
		t.Fatal(runErr)
	}
	if len(leaked) > 0 {
		t.Fatalf("console wrote to stdout: %q", leaked)
	}
	want := []string{`hello {"a":1} 3 [1,"x"]`, "info", "debug", "warning: careful", "error: TypeError: bad"}
	if !reflect.DeepEqual(lines, want) {
		t.Fatalf("log = %q, want %q", lines, want)
	}
}

func TestHostPanicIsAnError(t *testing.T) {
	host := runtime.HostFunc(func(_ context.Context, name string, _ json.RawMessage) (json.RawMessage, error) {
		panic("driver bug")
	})
	_, err := runWith(t, mustLoad(t, script(`vm.exec("x");`)), host)
	contains(t, err.Error(), "host call exec failed: driver bug")
	if errors.Is(err, runtime.ErrCancelled) {
		t.Fatal("a host panic is not a cancellation")
	}
}
