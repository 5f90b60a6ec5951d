package wasm

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/poligon/poligon/runtime"
)

// Run runs the script once in a fresh instance, bounded by run.Limits.
func (m *Module) Run(ctx context.Context, run runtime.Run) (runtime.Result, error) {
	if run.Host == nil {
		return runtime.Result{}, fmt.Errorf("run %s: no host to answer its calls", m.label())
	}
	limits := run.Limits.Resolve(m.manifest)
	timeout, memoryMB := limits.Timeout, limits.MemoryMB
	bound, err := m.manifest.Bind(run.Params)
	if err != nil {
		return runtime.Result{}, err
	}
	params, err := json.Marshal(bound)
	if err != nil {
		return runtime.Result{}, fmt.Errorf("run %s: encode params: %w", m.label(), err)
	}

	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, runtime.ErrTimeout)
	defer cancel()
	inst := m.newInstance(run, uint64(memoryMB)<<20, timeout)
	defer inst.close()
	if err := inst.start(runCtx); err != nil {
		return runtime.Result{}, inst.explain(ctx, runCtx, err)
	}
	value, failed, err := inst.runScript(params, run.VMID)
	switch {
	case err != nil:
		return runtime.Result{}, inst.explain(ctx, runCtx, err)
	case failed != nil && runCtx.Err() != nil:
		// The guest returned the error its call got as the run ended: the
		// run's end is the cause.
		return runtime.Result{}, inst.explain(ctx, runCtx, fmt.Errorf("%s", failed.Message))
	case failed != nil:
		return runtime.Result{}, &runtime.ScriptError{
			Script:  m.label(),
			Where:   failed.Where,
			Message: failed.Message,
			Hint:    failed.Hint,
			Err:     inst.state.hostError(failed),
		}
	}
	return runtime.Result{Value: value}, nil
}
