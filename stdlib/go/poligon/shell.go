package poligon

import "github.com/poligon/poligon/hostapi/calls"

// ExecOpts are the options of Exec and Check.
type ExecOpts struct {
	Timeout float64 // seconds; default 120
}

// ExpectOpts are the options of Expect.
type ExpectOpts struct {
	Timeout  float64 // seconds; default 120
	Contains string  // stdout must contain it
}

// RunOpts are the options of Run.
type RunOpts struct {
	Wait    float64 // seconds to wait for it; default 45
	Restart bool    // run a finished command again
}

// WaitBootOpts are the options of WaitBoot.
type WaitBootOpts struct {
	Timeout float64 // seconds; default 60
}

// ExecGUIOpts are the options of ExecGUI.
type ExecGUIOpts struct {
	User string // default "test"
}

// Exec runs a shell command as root (umask 022). It does not fail on the
// exit code: read Exit.
func (vm *VM) Exec(command string, opts ...ExecOpts) (calls.ExecAnswer, error) {
	var answer calls.ExecAnswer
	err := vm.Call(calls.Exec, calls.ExecArgs{Command: command, Timeout: firstOf(opts).Timeout}, &answer)
	return answer, err
}

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

// Run starts a long command detached (its state lives in the guest and
// survives a reboot), or picks up the one already running with the same
// command, and waits up to opts.Wait seconds. A finished command is
// reported, not repeated, unless opts.Restart.
func (vm *VM) Run(command string, opts ...RunOpts) (calls.RunAnswer, error) {
	o := firstOf(opts)
	var answer calls.RunAnswer
	err := vm.Call(calls.RunDetached, calls.RunArgs{Command: command, Wait: o.Wait, Restart: o.Restart}, &answer)
	return answer, err
}

// WaitBoot waits until the guest agent answers; OK is false on timeout.
func (vm *VM) WaitBoot(opts ...WaitBootOpts) (calls.WaitAnswer, error) {
	var answer calls.WaitAnswer
	err := vm.Call(calls.WaitBoot, calls.WaitBootArgs{Timeout: firstOf(opts).Timeout}, &answer)
	return answer, err
}

// ExecGUI launches a program in a user's desktop session and says whether
// it still runs after 2 s.
func (vm *VM) ExecGUI(command string, opts ...ExecGUIOpts) (calls.ExecGUIAnswer, error) {
	var answer calls.ExecGUIAnswer
	err := vm.Call(calls.ExecGUI, calls.ExecGUIArgs{Command: command, User: firstOf(opts).User}, &answer)
	return answer, err
}
