// Package app is poligon assembled once. From a checked config it builds
// the state store, the benches, the eyes, the planner, the script catalog,
// the stand builder and the audit log, and hands them to every door: the
// MCP server (engine.New), the command line (cmd/poligon) and the web view.
// A door adds its own transport and rules; what a call does is the app's.
//
// It is the composition root: the one package that knows every backend, so
// nothing above it (engine, cmd) and nothing below it (hostapi, the
// runtimes) imports a concrete backend.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/poligon/poligon/backends/vision"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/audit"
	"github.com/poligon/poligon/internal/store"
	"github.com/poligon/poligon/internal/trace"
	"github.com/poligon/poligon/runtime"
)

// App is one poligon process's services. Its fields are set by Open and
// not changed afterwards.
type App struct {
	Config *config.Config
	Log    *slog.Logger
	// Env is what every caller shares: evidence, locks, wait caps, eyes,
	// leases.
	Env *hostapi.Env
	// Eyes are the screen readers (OCR, the vision and grounding models).
	Eyes *Eyes
	// Store is the state shared with other poligon processes (leases,
	// stands); nil without state_dir.
	Store *store.Store
	// Audit records every call a door served; nil: none.
	Audit *audit.Log
	// Trace records every call on a machine as a step; nil without a store
	// or with [trace] disabled.
	Trace *trace.Recorder
	// Planner writes stand plans; nil when no planner model is configured.
	Planner *stand.Planner
	// Scripts are the loaded scripts and recipes (shipped and the
	// directory's).
	Scripts *catalog.Catalog
	// Stands plans, builds, follows and destroys stands.
	Stands *stand.Service

	benches   map[string]Bench
	closeEyes func()
	closed    sync.Once

	mu       sync.Mutex
	problems map[string]string // source -> readiness problem (a script that does not load)
}

// Options are what a door decides beyond the config.
type Options struct {
	Log *slog.Logger // nil: nowhere
	// OpenBench makes a configured bench; nil: the backend its type names.
	// Tests put a fake bench here.
	OpenBench func(config.Bench, *slog.Logger) (Bench, error)
	// Reserved are the tool names scripts may not take: the MCP door's
	// built-in tools (engine.BuiltinNames).
	Reserved map[string]bool
}

// Open assembles the app from a checked config. Close releases it.
func Open(ctx context.Context, cfg *config.Config, opts Options) (_ *App, err error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &App{
		Config: cfg,
		Log:    log,
		Env: &hostapi.Env{
			Evidence: cfg.EvidenceDir,
			Locks:    hostapi.NewLocks(lockDir(cfg)),
			MaxWait:  cfg.Limits.MaxWait.Duration,
			BusyWait: cfg.Limits.BusyWait.Duration,
		},
		benches:   map[string]Bench{},
		closeEyes: func() {},
		problems:  map[string]string{},
	}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	open := opts.OpenBench
	if open == nil {
		root := NewRoot()
		open = func(bc config.Bench, log *slog.Logger) (Bench, error) { return root.Open(bc, log) }
	}
	for _, bc := range cfg.Benches {
		b, err := open(bc, log)
		if err != nil {
			return nil, fmt.Errorf("bench %s: %w", bc.Name, err)
		}
		a.benches[bc.Name] = b
	}
	if a.Eyes, a.closeEyes, err = openEyes(cfg, log); err != nil {
		return nil, err
	}
	a.Env.Eyes = a.Eyes.hostapi()
	if a.Env.Dataset, err = openDataset(cfg.Dataset, log); err != nil {
		return nil, err
	}
	if a.Audit, err = audit.Open(cfg.AuditLog); err != nil {
		return nil, err
	}
	if cfg.StateDir != "" {
		// Leases and stands live in the store other poligon processes share.
		if a.Store, err = store.Open(cfg.StateDir); err != nil {
			return nil, err
		}
		a.Env.Leases = leases{a.Store}
		if !cfg.Trace.Disabled {
			a.Trace, err = trace.Open(a.Store, filepath.Join(cfg.StateDir, "trace"), trace.Options{
				MaxBytes: int64(cfg.Trace.MaxMB) << 20, MaxAge: cfg.Trace.MaxAge.Duration, Log: log, Digest: hostapi.Digest})
			if err != nil {
				return nil, err
			}
		}
	}
	if a.Planner, err = stand.NewPlanner(cfg.Planner, vision.Options{Log: log}); err != nil {
		return nil, fmt.Errorf("planner model: %w", err)
	}
	a.Scripts, err = catalog.Open(ctx, catalog.Options{
		Dir: cfg.ScriptsDir, StateDir: cfg.StateDir, Logger: log, Reserved: opts.Reserved, Problems: a.SetProblem, Trace: a.Trace,
		Limits: runtime.Limits{Timeout: cfg.Limits.ScriptTimeout.Duration, MemoryMB: cfg.Limits.ScriptMemoryMB},
	})
	if err != nil {
		return nil, err
	}
	var stands stand.Store
	if a.Store != nil {
		stands = a.Store // a nil *store.Store in the interface would not be nil
	}
	if a.Stands, err = stand.NewService(stand.ServiceOptions{
		Store: stands, Scripts: a.Scripts, Callers: a, Planner: a.Planner, Notes: cfg.Planner.Notes, Log: log,
		StateDir: cfg.StateDir, MaxMachines: cfg.Stands.MaxMachines, MaxBuilding: cfg.Stands.MaxBuilding, Trace: a.Trace,
	}); err != nil {
		return nil, err
	}
	return a, nil
}

// lockDir is where VM locks meet other poligon processes using the same
// config (a server and a `poligon run`).
func lockDir(cfg *config.Config) string {
	if cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(cfg.StateDir, "locks")
}

// Close releases the app: a stand building is interrupted (stand_apply
// resume=true continues it), the benches' connections are dropped (running
// VMs keep running), the eyes, the audit log and the store are closed.
// Closing twice is closing once.
func (a *App) Close() { a.closed.Do(a.close) }

func (a *App) close() {
	if a.Stands != nil {
		a.Stands.Close()
	}
	a.Trace.Close() // its last glances need the consoles
	for _, b := range a.benches {
		b.Close()
	}
	a.closeEyes()
	a.Audit.Close()
	if a.Scripts != nil {
		a.Scripts.Close()
	}
	if a.Store != nil {
		a.Store.Close()
	}
}

// Caller binds credentials to a bench ("" = the default bench).
func (a *App) Caller(ctx context.Context, who hostapi.Credentials, bench string) (*hostapi.Caller, error) {
	if bench == "" {
		bench = a.Config.DefaultBench
	}
	b, ok := a.benches[bench]
	if !ok {
		return nil, hostapi.Failf("benches: "+strings.Join(a.BenchNames(), ", "), "unknown bench %q", bench)
	}
	c, err := hostapi.Open(ctx, a.Env, b, who)
	if err != nil {
		return nil, err
	}
	return c.WithBench(bench), nil
}

// Local is the caller of a trusted door (stdio, the command line): the
// configured owner. Proxmox benches add their configured token.
func (a *App) Local() hostapi.Credentials {
	return hostapi.Credentials{Owner: hostapi.SanitizeOwner(a.Config.Owner)}
}

// BenchNames lists the configured benches, sorted.
func (a *App) BenchNames() []string {
	names := make([]string, 0, len(a.benches))
	for n := range a.benches {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// BenchFacts answers what an operator should see of each bench, by name.
func (a *App) BenchFacts() map[string]map[string]string {
	out := make(map[string]map[string]string, len(a.benches))
	for name, b := range a.benches {
		out[name] = b.Facts()
	}
	return out
}

// Consoles counts the open console connections over the benches.
func (a *App) Consoles() int {
	n := 0
	for _, b := range a.benches {
		n += b.Consoles()
	}
	return n
}

// SetProblem records (or with "" clears) a readiness problem from source.
func (a *App) SetProblem(source, problem string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if problem == "" {
		delete(a.problems, source)
	} else {
		a.problems[source] = problem
	}
}

// Problems lists what keeps this instance from serving as configured
// (/readyz, the startup log).
func (a *App) Problems() []string {
	var out []string
	if d := a.Config.EvidenceDir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			out = append(out, "evidence directory is gone (an unmounted volume?)")
		}
	}
	out = append(out, a.eyesProblems()...)
	out = append(out, a.datasetProblems()...)
	for _, name := range a.BenchNames() {
		for _, p := range a.benches[name].Problems() {
			out = append(out, fmt.Sprintf("bench %s: %s", name, p))
		}
	}
	a.mu.Lock()
	for src, p := range a.problems {
		out = append(out, src+": "+p)
	}
	a.mu.Unlock()
	sort.Strings(out)
	return out
}
