package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/poligon/poligon/runtime"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// manifestTimeout bounds reading a manifest: package inits and manifest().
const manifestTimeout = 30 * time.Second

// Module is a compiled Wasm script. It is immutable and safe for
// concurrent runs.
type Module struct {
	engine   *Engine
	path     string
	compiled wazero.CompiledModule
	manifest runtime.Manifest
	minBytes uint64 // the linear memory it starts with
}

var _ runtime.Module = (*Module)(nil)

// Load compiles wasm (read from path, which names it in errors), checks it
// speaks the poligon ABI, and instantiates it once to read and validate its
// manifest.
func (e *Engine) Load(ctx context.Context, path string, wasm []byte) (*Module, error) {
	began := time.Now()
	// Compile functions on every core: a Go guest has thousands.
	compileCtx := experimental.WithCompilationWorkers(ctx, goruntime.GOMAXPROCS(0))
	compiled, err := e.runtime.CompileModule(compileCtx, mergeDataSegments(wasm))
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", path, err)
	}
	m := &Module{engine: e, path: path, compiled: compiled}
	if err := m.checkShape(); err != nil {
		return nil, errors.Join(err, compiled.Close(ctx))
	}
	if m.manifest, err = m.readManifest(ctx); err != nil {
		return nil, errors.Join(err, compiled.Close(ctx))
	}
	e.log.Debug("wasm script loaded", "path", path, "script", m.manifest.Name, "took", time.Since(began))
	return m, nil
}

// Manifest answers what the script declared.
func (m *Module) Manifest() runtime.Manifest {
	man := m.manifest
	man.Params = slices.Clone(man.Params)
	man.Recipes = slices.Clone(man.Recipes)
	return man
}

// Close frees the compiled code; runs in flight are not interrupted.
func (m *Module) Close(ctx context.Context) error { return m.compiled.Close(ctx) }

// wantExports are the functions of the ABI: parameter and result types.
var wantExports = map[string][2][]api.ValueType{
	"_initialize": {nil, nil},
	"alloc":       {{api.ValueTypeI32}, {api.ValueTypeI32}},
	"manifest":    {nil, {api.ValueTypeI64}},
	"run":         {{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI64}, {api.ValueTypeI64}},
}

// checkShape refuses a module that is not a poligon script before running
// any of it, naming what is missing.
func (m *Module) checkShape() error {
	notScript := func(format string, args ...any) error {
		return fmt.Errorf("%s is not a poligon Wasm script: %s (build a main package that imports "+
			"github.com/poligon/poligon/stdlib/go/poligon with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared)",
			m.path, fmt.Sprintf(format, args...))
	}
	for _, f := range m.compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != "wasi_snapshot_preview1" && (mod != hostModule || name != hostCallName) {
			return notScript("it imports %s.%s; only wasi_snapshot_preview1 and %s.%s are provided", mod, name, hostModule, hostCallName)
		}
	}
	exports := m.compiled.ExportedFunctions()
	for _, name := range []string{"_initialize", "alloc", "manifest", "run"} {
		f, ok := exports[name]
		if !ok {
			return notScript("it does not export %s", name)
		}
		want := wantExports[name]
		if !slices.Equal(f.ParamTypes(), want[0]) || !slices.Equal(f.ResultTypes(), want[1]) {
			return notScript("its export %s has the wrong signature", name)
		}
	}
	mem, ok := m.compiled.ExportedMemories()["memory"]
	if !ok {
		return notScript("it does not export its memory")
	}
	m.minBytes = uint64(mem.Min()) << 16
	return nil
}

// readManifest instantiates the module with no host and decodes its
// manifest.
func (m *Module) readManifest(ctx context.Context) (runtime.Manifest, error) {
	readCtx, cancel := context.WithTimeoutCause(ctx, manifestTimeout, runtime.ErrTimeout)
	defer cancel()
	noHost := runtime.HostFunc(func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("host calls are not allowed while the manifest is read")
	})
	logf := func(line string) { m.engine.log.Debug("wasm script output", "path", m.path, "line", line) }
	inst := m.newInstance(runtime.Run{Host: noHost, Log: logf}, uint64(loadMemoryMB)<<20, manifestTimeout)
	defer inst.close()
	if err := inst.start(readCtx); err != nil {
		return runtime.Manifest{}, fmt.Errorf("%s: start the module to read its manifest: %w", m.path, inst.explain(ctx, readCtx, err))
	}
	value, failed, err := inst.callEnvelope("manifest")
	if err != nil {
		return runtime.Manifest{}, fmt.Errorf("%s: read the manifest: %w", m.path, inst.explain(ctx, readCtx, err))
	}
	if failed != nil {
		return runtime.Manifest{}, fmt.Errorf("%s: the manifest failed: %s", m.path, failed.Message)
	}
	var man runtime.Manifest
	if err := json.Unmarshal(value, &man); err != nil {
		return runtime.Manifest{}, fmt.Errorf("%s: decode the manifest: %w", m.path, err)
	}
	if err := man.Validate(); err != nil {
		return runtime.Manifest{}, fmt.Errorf("%s: invalid manifest: %w", m.path, err)
	}
	return man, nil
}
