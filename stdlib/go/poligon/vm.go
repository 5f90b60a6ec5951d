package poligon

import (
	"encoding/json"
	"fmt"
)

// Caller carries one host call: its name and JSON arguments, answered with
// JSON or an error. In a Wasm build it is the poligon.call import; a native
// test of a script passes its own to NewVM.
type Caller func(name string, args []byte) ([]byte, error)

// Error is a failed host call: what the script sees and may catch. Returned
// from Run (wrapped or not), it fails the run with its hint.
type Error struct {
	Call    string // the call's name, e.g. "expect"
	Message string
	Hint    string // what to do about it; may be empty
	ref     int    // the host's number for this error, echoed back when Run fails with it
}

func (e *Error) Error() string { return e.Message }

// VM is the machine the script runs against. Every verb blocks until the
// host answers; each checks on the host side that the VM is the caller's.
type VM struct {
	id   int
	call Caller
}

// NewVM answers a VM whose calls go through call.
func NewVM(vmid int, call Caller) *VM { return &VM{id: vmid, call: call} }

// ID answers the VM's id.
func (vm *VM) ID() int { return vm.id }

// Call makes the host call name with args encoded as JSON and decodes its
// answer into answer (nil: ignore it). The verbs are built on it; use it for
// a call this package has no verb for.
func (vm *VM) Call(name string, args, answer any) error {
	if args == nil {
		args = struct{}{}
	}
	in, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("%s: encode arguments: %w", name, err)
	}
	out, err := vm.call(name, in)
	if err != nil {
		return err
	}
	if answer == nil {
		return nil
	}
	if err := json.Unmarshal(out, answer); err != nil {
		return fmt.Errorf("%s: decode answer %.200q: %w", name, out, err)
	}
	return nil
}

// firstOf answers the first of a verb's optional options, or the zero value.
func firstOf[T any](opts []T) T {
	var zero T
	if len(opts) > 0 {
		zero = opts[0]
	}
	return zero
}
