package js

import (
	"errors"
	"testing"

	"github.com/poligon/poligon/runtime"
)

// A failed host call throws a PoligonError the script may catch, with the
// call name and hint.
func TestHostErrorCaught(t *testing.T) {
	h := newFakeHost()
	h.errs["expect"] = &runtime.HostError{Call: "expect", Message: "exit 1: no such user", Hint: "create the user first"}
	res, err := runWith(t, mustLoad(t, script(`
    try { vm.expect("id bob"); } catch (e) {
      return {isPoligon: e instanceof PoligonError, isError: e instanceof Error, name: e.name,
              call: e.call, message: e.message, hint: e.hint};
    }`)), h)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "caught", string(res.Value), `{"isPoligon":true,"isError":true,"name":"PoligonError",
		"call":"expect","message":"exit 1: no such user","hint":"create the user first"}`)
}

// Uncaught, it ends the run with the message, hint, location and the host's error.
func TestHostErrorUncaught(t *testing.T) {
	h := newFakeHost()
	backendErr := errors.New("the backend's own failure")
	herr := &runtime.HostError{Call: "expect", Message: "exit 1: no such user", Hint: "create the user first", Err: backendErr}
	h.errs["expect"] = herr
	_, err := runWith(t, mustLoad(t, script(`    vm.exec("true");
    vm.expect("id bob");`)), h)
	var se *runtime.ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a ScriptError", err)
	}
	if se.Message != "exit 1: no such user" || se.Hint != "create the user first" || se.Where != "t.js:6:14" || se.Script != "scripts/t.js" {
		t.Fatalf("ScriptError = %+v", se)
	}
	var got *runtime.HostError
	if !errors.As(err, &got) || got != herr {
		t.Fatalf("ScriptError does not wrap the host's error: %v", se.Err)
	}
	if !errors.Is(err, backendErr) {
		t.Fatalf("the run's error lost the backend's error chain: %v", err)
	}
}

// A plain Go error from the host has no hint but is still catchable.
func TestHostPlainError(t *testing.T) {
	h := newFakeHost()
	h.errs["screen.shot"] = errors.New("no console on this backend")
	_, err := runWith(t, mustLoad(t, script(`vm.screen.shot();`)), h)
	contains(t, err.Error(), "no console on this backend (at t.js:5:15)")
}

func TestThrownValues(t *testing.T) {
	for js, want := range map[string]string{
		`throw new Error("bad state")`: "bad state (at t.js:5:7)",
		`let o = null; o.x`:            "TypeError: Cannot read property 'x' of ",
		`throw "plain string"`:         "uncaught plain string (at t.js:5:1)",
		`throw Object.assign(new Error("no login"), {hint: "retype"})`: "no login (at t.js:5:21)",
		`return undefinedName`:      "ReferenceError: undefinedName is not defined (at t.js:5:8)",
		`function f() { f(); } f()`: "RangeError: call stack deeper than 4096 frames",
	} {
		_, err := runWith(t, mustLoad(t, script(js)), newFakeHost())
		if err == nil {
			t.Fatalf("%s: no error", js)
		}
		contains(t, err.Error(), want)
	}
	_, err := runWith(t, mustLoad(t, script(`throw Object.assign(new Error("no login"), {hint: "retype"})`)), newFakeHost())
	if se := (*runtime.ScriptError)(nil); !errors.As(err, &se) || se.Hint != "retype" {
		t.Fatalf("a script's own error keeps its hint: %#v", err)
	}
}

// An async run is awaited when it settles without the event loop.
func TestAsyncRun(t *testing.T) {
	res, err := runWith(t, mustLoad(t, `module.exports = {name: "a", description: "d",
  async run(vm) { const out = vm.expect("x"); return out + "!"; }};`), newFakeHost())
	if err != nil || string(res.Value) != `"undefined!"` {
		t.Fatalf("async run = %s, %v", res.Value, err)
	}
	_, err = runWith(t, mustLoad(t, `module.exports = {name: "a", description: "d",
  async run(vm) { throw new Error("async boom"); }};`), newFakeHost())
	contains(t, err.Error(), "async boom")
	_, err = runWith(t, mustLoad(t, `module.exports = {name: "a", description: "d",
  run(vm) { return new Promise(() => {}); }};`), newFakeHost())
	contains(t, err.Error(), "never settles")
}
