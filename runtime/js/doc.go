// Package js runs poligon scripts written in JavaScript on goja.
//
// A script is a CommonJS module exporting {name, description, title, params,
// tool, timeout, run(vm, params)} (stdlib/poligon.d.ts is its API). Load compiles
// it once (goja.Program), collects its literal vm.recipe("name", {...})
// calls from the AST and reads its manifest in a throwaway sandbox. Each Run
// evaluates the program in a fresh goja runtime (one runtime per run, as k6
// does), so runs share nothing and a Module runs concurrently and
// re-entrantly (a recipe run inside a run's host call).
//
// The sandbox (sandbox.go, prelude.js):
//   - the vm object is built in JS over one native host call, and frozen;
//     its verbs, one per host call, are written into prelude.js by
//     go generate from hostapi/calls.Registry;
//     the prelude captures the builtins it uses, so a script rewriting
//     JSON.stringify or Object.prototype changes nothing it sends;
//   - require takes "poligon/<module>" (embedded, lib/) and other scripts by
//     name through Options.Resolve; Node.js modules, paths and files are
//     refused; nothing reads the host filesystem (source maps are off, their
//     loader would);
//   - no process, no timers; console goes to the run's log, never stdout;
//   - Date answers Run.Clock, Math.random is seeded from Run.Seed, so the
//     same script with the same host answers makes the same calls (local
//     time methods use the process's time zone: goja reads time.Local);
//   - guards.js refuses builtin calls that would build a huge value in one
//     native step, which goja could not interrupt.
//
// A run ends on its context, its time limit and its memory ceiling
// (memory.go: a watchdog over the process heap, an approximation), each a
// *runtime.ScriptError at the script line it was running. The JS runs on its
// own goroutine, so Run answers even if the script is stuck in a builtin.
package js
