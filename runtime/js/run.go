package js

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/dop251/goja"

	"github.com/poligon/poligon/runtime"
)

// Run runs the script once in a fresh runtime: evaluate the module, call
// run(vm, params), answer its return value as JSON (undefined: null).
//
// Params missing from run.Params get their defaults; a required one missing
// or one the script does not declare is an error before anything runs.
// The run ends on ctx, on its time limit (run.Limits.Timeout, else the
// manifest's, else 10 minutes) and on its memory ceiling (see watchMemory),
// each a *runtime.ScriptError wrapping ErrCancelled, ErrTimeout or ErrMemory.
func (m *Module) Run(ctx context.Context, run runtime.Run) (runtime.Result, error) {
	if run.Host == nil {
		return runtime.Result{}, errors.New("js: Run needs a Host")
	}
	params, err := m.manifest.Bind(run.Params)
	if err != nil {
		return runtime.Result{}, err
	}
	limits := run.Limits.Resolve(m.manifest)
	var value json.RawMessage
	err = m.execute(ctx, run.Host, run.Log, limits, run.Clock, run.Seed, func(s *execution) error {
		exports, err := s.evalMain()
		if err != nil {
			return err
		}
		value, err = s.callRun(exports, run.VMID, params)
		return err
	})
	if err != nil {
		return runtime.Result{}, err
	}
	return runtime.Result{Value: value}, nil
}

// callRun calls exports.run(vm, params) and converts its answer.
func (s *execution) callRun(exports goja.Value, vmid int, params map[string]string) (json.RawMessage, error) {
	var runFn goja.Callable
	var this *goja.Object
	if err := s.guard(func() {
		this = exports.ToObject(s.rt)
		runFn, _ = goja.AssertFunction(this.Get("run"))
	}); err != nil {
		return nil, err
	}
	if runFn == nil {
		return nil, errorf(s.m.path, "run is not a function (module.exports changed since the script was loaded)")
	}
	vm, err := s.makeVM(goja.Undefined(), s.rt.ToValue(vmid))
	if err != nil {
		return nil, err
	}
	p := s.rt.NewObject()
	for _, param := range s.m.manifest.Params {
		_ = p.Set(param.Name, params[param.Name])
	}
	ret, err := runFn(this, vm, p)
	if err != nil {
		return nil, err
	}
	if promise, ok := ret.Export().(*goja.Promise); ok {
		if ret, err = s.settled(promise); err != nil {
			return nil, err
		}
	}
	text, err := s.result(goja.Undefined(), ret)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(text.String()), nil
}

// settled answers what an async run resolved to. There are no timers, so a
// promise still pending when run returns never settles.
func (s *execution) settled(p *goja.Promise) (goja.Value, error) {
	switch p.State() {
	case goja.PromiseStateFulfilled:
		return p.Result(), nil
	case goja.PromiseStateRejected:
		return nil, s.scriptError(&rejected{value: p.Result()})
	}
	return nil, errorf(s.m.path, "run returned a promise that never settles: the API is synchronous, call it without await")
}

// rejected is an async run's rejection, reported like a throw.
type rejected struct{ value goja.Value }

func (r *rejected) Error() string { return "uncaught (in promise) " + r.value.String() }
