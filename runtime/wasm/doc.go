// Package wasm runs poligon scripts compiled to WebAssembly, on wazero.
//
// An Engine holds one wazero runtime (compiler, compilation cache on disk)
// shared by every module; Load compiles a script once and reads its
// manifest; each Run instantiates a fresh instance, so runs share nothing.
// To keep a run of a Go script at a few milliseconds, Load merges its tens
// of thousands of data segments into a few (datamerge.go) and instances
// reuse zeroed linear memories (memory.go).
//
// # Building a script
//
// A script is a WASI (wasip1) reactor written in ordinary Go with the SDK
// github.com/poligon/poligon/stdlib/go/poligon:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o x.wasm .
//
// # ABI, version 1
//
// Any language can speak it; the Go SDK is one implementation.
//
// The module imports only wasi_snapshot_preview1 and the function
//
//	poligon.call(namePtr, nameLen, argsPtr, argsLen, bufPtr, bufCap i32) -> i64
//
// and exports its memory as "memory" and
//
//	_initialize()                         run once per instance (Go: package inits)
//	alloc(size i32) -> ptr i32            a guest buffer of size bytes for the host to fill
//	manifest() -> i64                     packed ptr<<32 | len of an answer envelope
//	run(paramsPtr, paramsLen i32, vmid i64) -> i64   likewise
//
// Host call. The name is a call of hostapi/calls ("exec", "screen.shot",
// ...) and args its JSON arguments. The host makes the call and writes the
// answer into the guest's buffer [bufPtr, bufPtr+bufCap). The i64 result is
// status<<32 | length:
//
//	status 0  the buffer holds the call's JSON answer, length bytes
//	status 1  the buffer holds an error envelope:
//	          {"call": "expect", "message": "...", "hint": "...", "ref": 3}
//	status 2  the answer (of either kind) is larger than bufCap: length is
//	          its size. The host keeps it; the guest collects it with a
//	          second poligon.call whose nameLen is 0 and whose buffer holds
//	          at least length bytes (the collected status is then 0 or 1).
//
// One crossing suffices for every answer that fits the guest's buffer (the
// Go SDK keeps 64 KiB), and the host never calls into the guest while the
// guest is inside a call (re-entering a Go guest is nothing to rely on). "ref" numbers
// the host's errors within the instance; a run that fails with a host error
// echoes it so the host can hand back its own error value.
//
// Manifest and run. The host writes the params JSON (an object of strings,
// defaults applied) into a buffer from alloc and calls run. Both answer a
// pointer to an envelope the guest keeps alive until its next export call:
//
//	{"abi": 1, "value": <the manifest, or the run's JSON result>}
//	{"abi": 1, "error": {"message": "...", "call": "...", "hint": "...", "ref": 3, "where": "main.go:12"}}
//
// (call, hint and ref when the error came from a host call; where when it
// is a panic.)
// The manifest value has the JSON shape of runtime.Manifest (its timeout in
// nanoseconds). The host refuses a module with another abi.
//
// # Sandbox
//
// Each run gets a fresh instance with: no filesystem, no environment, no
// arguments, an empty stdin; stdout and stderr go line by line to
// runtime.Run.Log (never the process's stdout, which may carry stdio MCP);
// a virtual clock starting at runtime.Run.Clock that advances 1 µs per
// reading and by the length of every sleep (a guest sleep does wait, but
// stops when the run ends); a random source seeded from runtime.Run.Seed.
// The same script with the same host answers thus makes the same calls.
//
// Limits: linear memory is capped per run (runtime.Limits.MemoryMB,
// default 256 MiB) by refusing memory.grow beyond it, which a Go guest
// reports as out of memory: the run fails with runtime.ErrMemory. The run's
// time limit (Limits.Timeout, else the manifest's Timeout, else 10 min) is a
// context deadline; wazero's close-on-context-done stops a spinning guest
// (runtime.ErrTimeout) and the host call passes the context to
// runtime.Host.Call, which watches it. Cancelling the caller's context ends
// the run with runtime.ErrCancelled.
package wasm
