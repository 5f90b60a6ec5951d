// Package catalog holds poligon's scripts: the shipped scripts and recipes
// (embedded in the binary) and those of the watched scripts directory,
// compiled with the runtime their extension names, checked against each
// other, reloaded when the directory changes, and run on a VM with a
// transcript. The MCP server hears of it through Tools (Subscribe): the
// catalog says which tool scripts come and go, and the server turns them
// into MCP tools.
package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/poligon/poligon/internal/trace"
	"github.com/poligon/poligon/recipes"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/js"
	"github.com/poligon/poligon/runtime/wasm"
	"github.com/poligon/poligon/scripts"
)

// Script is one loaded script: a JS or Wasm module.
type Script struct {
	Name   string
	File   string // where it came from: "shipped:login.js" or a path
	Source []byte
	Sum    string
	Module runtime.Module
}

// Manifest answers what the script declares.
func (s *Script) Manifest() runtime.Manifest { return s.Module.Manifest() }

// Tools is what the catalog tells its subscriber (the MCP server) about
// tool scripts as they load, change and go. Both are called with no lock
// held.
type Tools interface {
	// AddScript registers (or replaces) the tool vm_<name> of sc.
	AddScript(sc *Script)
	// RemoveScript unregisters the tool vm_<name>.
	RemoveScript(name string)
}

// Options configure a catalog.
type Options struct {
	Dir      string       // the watched scripts directory; "" for none
	StateDir string       // transcripts and the Wasm compilation cache; "" for none
	Logger   *slog.Logger // never nil
	Limits   runtime.Limits
	// Reserved lists tool names scripts may not take (the built-in tools).
	Reserved map[string]bool
	// Problems records (or with "" clears) a readiness problem: a file of
	// the directory that does not load. Nil: the log alone says it.
	Problems func(source, problem string)
	// Trace records each host call of a run as a step; nil: none.
	Trace *trace.Recorder
}

// maxRecipeDepth bounds recipe nesting (a script calling a recipe calling a
// recipe ...).
const maxRecipeDepth = 3

// Catalog is every loaded script. Make it with Open.
type Catalog struct {
	problems func(source, problem string) // nil: none kept
	trace    *trace.Recorder              // nil: no trace
	log      *slog.Logger
	wasm     *wasm.Engine
	dir      string // the watched directory; "" for none
	stateDir string
	limits   runtime.Limits
	reserved map[string]bool

	retrying bool // rescan is trying failed files again (rescans do not overlap)

	mu      sync.RWMutex
	tools   Tools // the subscriber; nil: none yet (check, replay, the CLI)
	byName  map[string]*Script
	shipped map[string]*Script // by name, as embedded
	byFile  map[string]*Script // the directory's scripts by path
	failed  map[string]error   // the directory's files that did not load, by file
}

// source is one file to load.
type source struct {
	file string
	data []byte
}

func (s *source) sum() string {
	h := sha256.Sum256(s.data)
	return hex.EncodeToString(h[:])
}

// shippedSources answers the embedded scripts and recipes.
func shippedSources() ([]source, error) {
	var out []source
	for _, fsys := range []fs.FS{scripts.FS, recipes.FS} {
		err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !isScriptFile(path) {
				return err
			}
			data, err := fs.ReadFile(fsys, path)
			out = append(out, source{file: "shipped:" + path, data: data})
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func isScriptFile(name string) bool {
	return strings.HasSuffix(name, ".js") || strings.HasSuffix(name, ".wasm")
}

// dirSources reads the scripts directory (not recursive). A missing
// directory holds no scripts.
func dirSources(dir string) ([]source, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []source
	for _, e := range entries {
		if e.IsDir() || !isScriptFile(e.Name()) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			continue // removed while we read: the next rescan sees it gone
		}
		out = append(out, source{file: path, data: data})
	}
	return out, nil
}

// compile loads one file with the runtime its extension names.
func (ss *Catalog) compile(ctx context.Context, src source) (*Script, error) {
	var m runtime.Module
	var err error
	if strings.HasSuffix(src.file, ".wasm") {
		m, err = ss.wasm.Load(ctx, src.file, src.data)
	} else {
		m, err = js.Load(src.file, src.data, js.Options{Resolve: ss.resolve, Logger: ss.log})
	}
	if err != nil {
		return nil, err
	}
	return &Script{Name: m.Manifest().Name, File: src.file, Source: src.data, Sum: src.sum(), Module: m}, nil
}

// Compile loads a script that is not part of the catalog (a stand's
// compiled module) the way the catalog loads its own: its require()s and
// recipe calls resolve against the loaded scripts. Run runs it.
func (ss *Catalog) Compile(ctx context.Context, file string, data []byte) (*Script, error) {
	return ss.compile(ctx, source{file: file, data: data})
}

// Manifests answers the manifest of every loaded script by name (what a
// stand plan's recipe and script steps may name).
func (ss *Catalog) Manifests() map[string]runtime.Manifest {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	out := make(map[string]runtime.Manifest, len(ss.byName))
	for name, sc := range ss.byName {
		out[name] = sc.Manifest()
	}
	return out
}

// resolve answers another script's source for require().
func (ss *Catalog) resolve(name string) ([]byte, string, error) {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	sc, ok := ss.byName[name]
	if !ok || strings.HasSuffix(sc.File, ".wasm") {
		return nil, "", fmt.Errorf("no JavaScript script or recipe named %q", name)
	}
	return sc.Source, sc.File, nil
}

// lookup answers a loaded script by name.
func (ss *Catalog) lookup(name string) (*Script, bool) {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	sc, ok := ss.byName[name]
	return sc, ok
}

// check validates a set of scripts against each other and the built-in
// tools: tool names must not collide, recipe calls must name a script and
// only its params, and recipe chains nest at most maxRecipeDepth deep.
// It answers the problem of each script at fault.
func (ss *Catalog) check(set map[string]*Script) map[string]error {
	problems := map[string]error{}
	for name, sc := range set {
		m := sc.Manifest()
		if m.Tool && ss.reserved["vm_"+name] {
			problems[name] = fmt.Errorf("tool vm_%s collides with a built-in tool", name)
			continue
		}
		for _, rc := range m.Recipes {
			target, ok := set[rc.Name]
			if !ok {
				problems[name] = fmt.Errorf("calls unknown recipe %q", rc.Name)
				break
			}
			declared := map[string]bool{}
			for _, p := range target.Manifest().Params {
				declared[p.Name] = true
			}
			for _, p := range rc.Params {
				if !declared[p] {
					problems[name] = fmt.Errorf("passes unknown param %q to recipe %s", p, rc.Name)
				}
			}
		}
	}
	for name := range set {
		if _, bad := problems[name]; bad {
			continue
		}
		if depth, chain := recipeDepth(set, name, nil); depth > maxRecipeDepth {
			problems[name] = fmt.Errorf("recipes nest %d deep (%s), at most %d", depth, strings.Join(chain, " -> "), maxRecipeDepth)
		}
	}
	return problems
}

// recipeDepth answers the longest chain of literal recipe calls below name
// and the chain itself; a cycle counts as too deep.
func recipeDepth(set map[string]*Script, name string, path []string) (int, []string) {
	path = append(path[:len(path):len(path)], name)
	for _, p := range path[:len(path)-1] {
		if p == name {
			return maxRecipeDepth + 1, path
		}
	}
	sc, ok := set[name]
	if !ok {
		return 0, path
	}
	best, bestChain := 0, path
	for _, rc := range sc.Manifest().Recipes {
		d, chain := recipeDepth(set, rc.Name, path)
		if d+1 > best {
			best, bestChain = d+1, chain
		}
	}
	return best, bestChain
}
