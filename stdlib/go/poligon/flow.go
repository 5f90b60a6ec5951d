package poligon

import (
	"encoding/json"

	"github.com/poligon/poligon/hostapi/calls"
)

// Log writes a line to the run's step log.
func (vm *VM) Log(message string) error {
	return vm.Call(calls.Log, calls.LogArgs{Message: message}, nil)
}

// Recipe runs a recipe on this VM under the same lock (nesting at most 3
// deep) and answers its result as JSON.
func (vm *VM) Recipe(name string, params map[string]string) (json.RawMessage, error) {
	var answer json.RawMessage
	err := vm.Call(calls.Recipe, calls.RecipeArgs{Name: name, Params: params}, &answer)
	return answer, err
}

// Step marks the start of step n of of: a line in the step log, and the
// progress a stand's builder records and resumes from.
func (vm *VM) Step(n, of int, label string) error {
	return vm.Call(calls.Step, calls.StepArgs{N: n, Of: of, Label: label}, nil)
}

// Sleep sleeps, at most 600 seconds. Prefer a Wait verb; use it rather than
// time.Sleep, which the host does not see.
func (vm *VM) Sleep(seconds float64) error {
	return vm.Call(calls.Sleep, calls.SleepArgs{Seconds: seconds}, nil)
}
