package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/poligon/poligon/runtime"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one run's (or one manifest read's) instance of a module.
type instance struct {
	module  *Module
	run     runtime.Run
	timeout time.Duration
	mem     *cappedMemory
	state   *callState
	stdout  *lineWriter
	stderr  *lineWriter
	ctx     context.Context // the run's, carrying state and mem to wazero
	mod     api.Module      // nil until started
}

func (m *Module) newInstance(run runtime.Run, memLimit uint64, timeout time.Duration) *instance {
	return &instance{
		module:  m,
		run:     run,
		timeout: timeout,
		mem:     &cappedMemory{limit: memLimit},
		state:   &callState{host: run.Host},
		stdout:  &lineWriter{log: run.Log},
		stderr:  &lineWriter{log: run.Log},
	}
}

// start instantiates the module (running _initialize) under ctx.
func (inst *instance) start(ctx context.Context) error {
	if inst.module.minBytes > inst.mem.limit {
		inst.mem.refused = true // wazero would fail the first allocation hard
		return runtime.ErrMemory
	}
	inst.ctx = experimental.WithMemoryAllocator(context.WithValue(ctx, callStateKey{}, inst.state), inst.mem)
	config := sandboxConfig(ctx, inst.run.Clock, inst.run.Seed, inst.stdout, inst.stderr)
	mod, err := inst.module.engine.runtime.InstantiateModule(inst.ctx, inst.module.compiled, config)
	if err != nil {
		return err
	}
	inst.mod = mod
	return nil
}

// close flushes the output and frees the instance.
func (inst *instance) close() {
	inst.stdout.Flush()
	inst.stderr.Flush()
	if inst.mod != nil {
		_ = inst.mod.Close(context.Background()) // a closed instance has nothing left to report
	}
}

// runScript hands the params to the guest and calls run.
func (inst *instance) runScript(params []byte, vmid int) (json.RawMessage, *errorBody, error) {
	res, err := inst.mod.ExportedFunction("alloc").Call(inst.ctx, api.EncodeU32(uint32(len(params))))
	if err != nil {
		return nil, nil, err
	}
	if !inst.mod.Memory().Write(api.DecodeU32(res[0]), params) {
		return nil, nil, abiErrorf("alloc(%d) answered %d, outside memory", len(params), api.DecodeU32(res[0]))
	}
	return inst.callEnvelope("run", res[0], api.EncodeU32(uint32(len(params))), api.EncodeI64(int64(vmid)))
}

// envelope is what manifest and run answer.
type envelope struct {
	ABI   int             `json:"abi"`
	Value json.RawMessage `json:"value"`
	Error *errorBody      `json:"error"`
}

// callEnvelope calls an export answering an envelope and decodes it.
func (inst *instance) callEnvelope(export string, params ...uint64) (json.RawMessage, *errorBody, error) {
	res, err := inst.mod.ExportedFunction(export).Call(inst.ctx, params...)
	if err != nil {
		return nil, nil, err
	}
	ptr, n := uint32(res[0]>>32), uint32(res[0])
	b, ok := inst.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, nil, abiErrorf("%s answered [%d, +%d), outside memory", export, ptr, n)
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, nil, abiErrorf("%s answered no envelope: %v", export, err)
	}
	if env.ABI != abiVersion {
		return nil, nil, &abiError{fmt.Sprintf("speaks ABI %d, this poligon speaks %d: rebuild it with this poligon's SDK", env.ABI, abiVersion)}
	}
	if env.Error != nil {
		return nil, env.Error, nil
	}
	if len(env.Value) == 0 {
		env.Value = json.RawMessage("null")
	}
	return env.Value, nil, nil
}

// explain turns a failed instantiation or export call into the run's
// error: a limit, a cancellation, a crash or a trap. parent is the caller's
// context, ctx the run's (parent plus the time limit).
func (inst *instance) explain(parent, ctx context.Context, err error) error {
	inst.stdout.Flush()
	inst.stderr.Flush()
	name := inst.module.label()
	se := &runtime.ScriptError{Script: name}
	var exit *sys.ExitError
	var abi *abiError
	switch {
	case inst.mem.refused && inst.mod == nil && inst.module.minBytes > inst.mem.limit:
		se.Message = fmt.Sprintf("script %s needs %d MiB of memory to start, more than its limit of %d MiB",
			name, (inst.module.minBytes+1<<20-1)>>20, inst.mem.limit>>20)
		se.Hint = "raise the run's memory limit"
		se.Err = runtime.ErrMemory
	case inst.mem.refused:
		se.Message = fmt.Sprintf("script %s ran out of memory: its limit is %d MiB", name, inst.mem.limit>>20)
		se.Hint = "allocate less, or raise the run's memory limit"
		se.Err = runtime.ErrMemory
	case parent.Err() != nil:
		se.Message = fmt.Sprintf("script %s was cancelled", name)
		se.Err = errors.Join(runtime.ErrCancelled, context.Cause(parent))
	case ctx.Err() != nil:
		se.Message = fmt.Sprintf("script %s ran past its time limit of %s", name, inst.timeout)
		se.Hint = "do less per run, or raise the script's timeout"
		se.Err = runtime.ErrTimeout
	case errors.As(err, &exit):
		se.Message = fmt.Sprintf("script %s exited with code %d", name, exit.ExitCode())
		if inst.stderr.crash != "" {
			se.Message += ": " + inst.stderr.crash
		}
		se.Err = err
	case errors.As(err, &abi):
		se.Message = fmt.Sprintf("script %s %s", name, abi.msg)
		se.Err = err
	case inst.stderr.crash != "": // the Go runtime aborts with a trap
		se.Message = fmt.Sprintf("script %s crashed: %s", name, inst.stderr.crash)
		se.Err = err
	default:
		first, _, _ := strings.Cut(err.Error(), "\n") // wazero appends a wasm stack trace
		se.Message = fmt.Sprintf("script %s failed: %s", name, first)
		se.Err = err
	}
	return se
}

// label names the module in errors: its script name, else its path.
func (m *Module) label() string {
	if m.manifest.Name != "" {
		return m.manifest.Name
	}
	return m.path
}
