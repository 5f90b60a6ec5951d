package poligon

// Expect and Check are written by hand (GoByHand in hostapi/calls.Registry):
// they answer stdout, not the whole ExecAnswer. calls_gen.go has the rest.

import "github.com/poligon/poligon/hostapi/calls"

// Expect runs a command and fails unless it exits 0 (and its stdout
// contains opts.Contains). It answers stdout.
func (vm *VM) Expect(command string, opts ...ExpectOpts) (string, error) {
	o := firstOf(opts)
	var answer calls.ExecAnswer
	err := vm.Call(calls.Expect, calls.ExpectArgs{Command: command, Timeout: o.Timeout, Contains: o.Contains}, &answer)
	return answer.Stdout, err
}

// Check runs a command and answers its stdout and true when it exits 0,
// false otherwise.
func (vm *VM) Check(command string, opts ...ExecOpts) (stdout string, ok bool, err error) {
	var answer calls.CheckAnswer
	err = vm.Call(calls.Check, calls.ExecArgs{Command: command, Timeout: firstOf(opts).Timeout}, &answer)
	if err != nil || !answer.OK {
		return "", false, err
	}
	return answer.Stdout, true, nil
}
