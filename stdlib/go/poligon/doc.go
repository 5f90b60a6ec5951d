// Package poligon is the Go SDK for poligon Wasm scripts: a script is an
// ordinary Go main package that registers itself in init and is built as a
// WASI reactor.
//
//	package main
//
//	import "github.com/poligon/poligon/stdlib/go/poligon"
//
//	func init() {
//		poligon.Register(poligon.Script{
//			Name:        "uname",
//			Description: "Print the kernel name and version of the VM.",
//			Params:      []poligon.Param{{Name: "flags", Default: poligon.Str("-a")}},
//			Run:         run,
//		})
//	}
//
//	func run(vm *poligon.VM, params map[string]string) (any, error) {
//		return vm.Expect("uname " + params["flags"])
//	}
//
//	func main() {}
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o uname.wasm .
//
// The verbs are those of poligon.d.ts with the argument and answer types of
// hostapi/calls; options are an optional trailing struct. Most verbs, and
// every options struct, are generated from hostapi/calls.Registry
// (calls_gen.go); Expect, Check, ReadFile, WriteFile and SaveShot are
// written by hand over VM.Call, which makes any call by name. Every verb
// blocks until the host answers. A failed call answers an *Error carrying
// the host's hint; returning it (wrapped or not) from Run fails the run
// with that hint.
//
// A script sees no filesystem, environment, network or real clock: time.Now
// starts at the run's fixed clock, math/rand and crypto/rand are seeded per
// run, and stdout and stderr go to the run's log. Use the VM's verbs (and
// vm.Sleep rather than time.Sleep) for anything outside.
//
// The wire between this package and the host is documented in
// runtime/wasm/doc.go. Outside a wasip1 build only NewVM works (for testing
// a script's Run natively against a fake Caller).
package poligon
