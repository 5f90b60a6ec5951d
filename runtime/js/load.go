package js

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"

	"github.com/poligon/poligon/runtime"
)

// Resolver finds another script or recipe by name for require(): its source
// and the path it was read from. The loader provides it. It is asked on
// every run that requires the name (so an edited file is picked up); the
// compiled form is cached by path and content.
type Resolver func(name string) (source []byte, path string, err error)

// Options configure Load.
type Options struct {
	Resolve Resolver     // nil: scripts can require only the stdlib
	Logger  *slog.Logger // console output of runs without a Run.Log; nil: dropped
}

// Module is a compiled script. It implements runtime.Module.
type Module struct {
	path     string // as given to Load, for errors
	file     string // its base name, as locations show it
	program  *goja.Program
	manifest runtime.Manifest
	opts     Options
	deps     *programCache // compiled required scripts, shared by runs
}

var _ runtime.Module = (*Module)(nil)

// Manifest answers what the script declared (a copy: the Module stays immutable).
func (m *Module) Manifest() runtime.Manifest {
	out := m.manifest
	out.Params = slices.Clone(out.Params)
	out.Recipes = slices.Clone(out.Recipes)
	return out
}

// Limits of the sandbox that reads a manifest at load time (a var: tests
// shorten it).
var (
	loadTimeout  = 10 * time.Second
	loadMemoryMB = 256
)

// Load compiles a script and reads and validates its manifest. Every error
// is a *runtime.ScriptError naming the file (and the line when it has one).
func Load(path string, source []byte, opts Options) (*Module, error) {
	file := filepath.Base(path)
	program, recipes, err := compileModule(path, file, source)
	if err != nil {
		return nil, err
	}
	m := &Module{path: path, file: file, program: program, opts: opts, deps: newProgramCache()}
	manifest, err := m.readManifest()
	if err != nil {
		return nil, err
	}
	manifest.Recipes = recipes
	manifest.MaxSleep = literalMaxSleep(file, source)
	m.manifest = manifest
	return m, nil
}

// compileModule parses a CommonJS source inside its module wrapper, collects
// its literal recipe calls and compiles it.
func compileModule(path, file string, source []byte) (*goja.Program, []runtime.RecipeCall, error) {
	ast, err := parser.ParseFile(nil, file, wrapModule(source), 0, parser.WithDisableSourceMaps)
	if err != nil {
		return nil, nil, syntaxError(path, source, err)
	}
	program, err := goja.CompileAST(ast, false)
	if err != nil {
		return nil, nil, syntaxError(path, source, err)
	}
	return program, collectRecipes(ast), nil
}

// readManifest evaluates the module once in a sandbox whose host refuses
// every call (no vm exists at load time anyway) and reads its exports.
func (m *Module) readManifest() (runtime.Manifest, error) {
	refuse := runtime.HostFunc(func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("host calls are not available while loading a script")
	})
	var manifest runtime.Manifest
	err := m.execute(context.Background(), refuse, nil, runtime.Limits{Timeout: loadTimeout, MemoryMB: loadMemoryMB},
		time.Unix(0, 0).UTC(), 0, func(s *execution) error {
			exports, err := s.evalMain()
			if err != nil {
				return err
			}
			var invalid error
			if err := s.guard(func() { manifest, invalid = parseManifest(exports) }); err != nil {
				return err // a getter threw
			}
			if invalid != nil {
				return errorf(m.path, "manifest: %v", invalid)
			}
			return nil
		})
	return manifest, err
}

// programCache keeps the compiled form of required scripts between runs,
// keyed by path and source, so a changed file is compiled again.
type programCache struct {
	mu       sync.Mutex
	programs map[string]*goja.Program
}

func newProgramCache() *programCache { return &programCache{programs: map[string]*goja.Program{}} }

func (c *programCache) get(key string) *goja.Program {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.programs[key]
}

func (c *programCache) put(key string, p *goja.Program) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.programs) > 256 { // scripts are edited in place: forget stale versions
		clear(c.programs)
	}
	c.programs[key] = p
}

// errorf is a ScriptError without a location.
func errorf(path, format string, args ...any) error {
	return &runtime.ScriptError{Script: path, Message: fmt.Sprintf(format, args...)}
}
