package js

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"

	"github.com/poligon/poligon/runtime"
)

// The stdlib scripts may require as "poligon/<name>", compiled once.
//
//go:embed lib/*.js
var libFiles embed.FS

var stdlib = compileStdlib()

func compileStdlib() map[string]*goja.Program {
	entries, err := libFiles.ReadDir("lib")
	if err != nil {
		panic(err)
	}
	programs := map[string]*goja.Program{}
	for _, e := range entries {
		src, err := libFiles.ReadFile("lib/" + e.Name())
		if err != nil {
			panic(err)
		}
		name := "poligon/" + strings.TrimSuffix(e.Name(), ".js")
		ast, err := parser.ParseFile(nil, name, wrapModule(src), 0, parser.WithDisableSourceMaps)
		if err != nil {
			panic(fmt.Sprintf("stdlib %s: %v", name, err))
		}
		program, err := goja.CompileAST(ast, false)
		if err != nil {
			panic(fmt.Sprintf("stdlib %s: %v", name, err))
		}
		programs[name] = program
	}
	return programs
}

// StdlibModules lists the modules require("poligon/...") can load.
func StdlibModules() []string {
	names := make([]string, 0, len(stdlib))
	for name := range stdlib {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// nodeModules are refused by name, with a message saying why, instead of
// being looked up as scripts.
var nodeModules = map[string]bool{
	"assert": true, "buffer": true, "child_process": true, "cluster": true, "crypto": true, "dgram": true,
	"dns": true, "events": true, "fs": true, "http": true, "http2": true, "https": true, "inspector": true,
	"module": true, "net": true, "os": true, "path": true, "perf_hooks": true, "process": true,
	"querystring": true, "readline": true, "repl": true, "stream": true, "string_decoder": true,
	"timers": true, "tls": true, "tty": true, "url": true, "util": true, "v8": true, "vm": true,
	"worker_threads": true, "zlib": true,
}

func (s *execution) requirable() string {
	return fmt.Sprintf("require takes a stdlib module (%s) or another script or recipe by name (\"./name\" or \"name\")",
		strings.Join(StdlibModules(), ", "))
}

// requireModule is require(): stdlib modules and scripts by name, each
// evaluated once per run; never a file of the host.
func (s *execution) requireModule(fc goja.FunctionCall) goja.Value {
	arg := fc.Argument(0)
	spec, ok := arg.Export().(string)
	if !ok {
		panic(s.rt.NewTypeError("require: the module name must be a string, not %s", describe(arg)))
	}
	key, load := s.resolveModule(spec)
	if mod, ok := s.modules[key]; ok {
		return mod.Get("exports")
	}
	program, filename := load()
	mod := s.rt.NewObject()
	_ = mod.Set("id", key)
	_ = mod.Set("exports", s.rt.NewObject())
	s.modules[key] = mod // before evaluating: cycles see the partial exports, as in Node
	if err := s.evalModule(program, filename, mod); err != nil {
		delete(s.modules, key)
		s.rethrow(err)
	}
	return mod.Get("exports")
}

// resolveModule checks a require() name and answers its cache key and how
// to compile it; a refused name throws.
func (s *execution) resolveModule(spec string) (string, func() (*goja.Program, string)) {
	if strings.HasPrefix(spec, "poligon/") {
		program, ok := stdlib[spec]
		if !ok {
			s.throw("require(%q): there is no stdlib module %s; %s", spec, spec, s.requirable())
		}
		return spec, func() (*goja.Program, string) { return program, spec }
	}
	bare := strings.TrimPrefix(spec, "node:")
	if nodeModules[bare] || strings.HasPrefix(spec, "node:") {
		s.throw("require(%q): Node.js modules are not available in the sandbox; %s", spec, s.requirable())
	}
	name := strings.TrimSuffix(strings.TrimPrefix(spec, "./"), ".js")
	if !runtime.NamePattern.MatchString(name) {
		s.throw("require(%q): files cannot be required, only modules by name; %s", spec, s.requirable())
	}
	if s.m.opts.Resolve == nil {
		s.throw("require(%q): no other scripts are available here; %s", spec, s.requirable())
	}
	return "script:" + name, func() (*goja.Program, string) {
		source, from, err := s.m.opts.Resolve(name)
		if err != nil {
			s.throw("require(%q): %v", spec, err)
		}
		sum := sha256.Sum256(source)
		cacheKey := from + "\x00" + hex.EncodeToString(sum[:])
		program := s.m.deps.get(cacheKey)
		if program == nil {
			program, _, err = compileModule(from, filepath.Base(from), source)
			if err != nil {
				s.throw("require(%q): %v", spec, err)
			}
			s.m.deps.put(cacheKey, program)
		}
		return program, path.Base(filepath.ToSlash(from))
	}
}

// evalModule runs a compiled CommonJS module, filling module.exports.
func (s *execution) evalModule(program *goja.Program, filename string, mod *goja.Object) error {
	fnVal, err := s.rt.RunProgram(program)
	if err != nil {
		return err
	}
	fn, ok := goja.AssertFunction(fnVal)
	if !ok {
		return fmt.Errorf("module %s did not compile to a function", filename)
	}
	_, err = fn(goja.Undefined(), mod.Get("exports"), s.require, mod, s.rt.ToValue(filename))
	return err
}

// evalMain evaluates the script itself and answers its exports.
func (s *execution) evalMain() (goja.Value, error) {
	mod := s.rt.NewObject()
	_ = mod.Set("id", "script:"+s.m.file)
	_ = mod.Set("exports", s.rt.NewObject())
	if err := s.evalModule(s.m.program, s.m.file, mod); err != nil {
		return nil, err
	}
	return mod.Get("exports"), nil
}

// throw throws a plain Error (the intrinsic one, whatever the script did to
// the global) into the script.
func (s *execution) throw(format string, args ...any) {
	obj, err := s.rt.New(s.errorCtor, s.rt.ToValue(fmt.Sprintf(format, args...)))
	if err != nil {
		s.rethrow(err)
	}
	panic(obj)
}
