package wasm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/poligon/poligon/runtime"
)

// defaultTimeout bounds a run when neither its limits nor its manifest do.
const defaultTimeout = 10 * time.Minute

// Run runs the script once in a fresh instance, bounded by run.Limits.
func (m *Module) Run(ctx context.Context, run runtime.Run) (runtime.Result, error) {
	if run.Host == nil {
		return runtime.Result{}, fmt.Errorf("run %s: no host to answer its calls", m.label())
	}
	timeout := run.Limits.Timeout
	if timeout <= 0 {
		timeout = m.manifest.Timeout
	}
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	memoryMB := run.Limits.MemoryMB
	if memoryMB <= 0 {
		memoryMB = defaultMemoryMB
	}
	params := []byte("{}")
	if len(run.Params) > 0 {
		var err error
		if params, err = json.Marshal(run.Params); err != nil {
			return runtime.Result{}, fmt.Errorf("run %s: encode params: %w", m.label(), err)
		}
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
