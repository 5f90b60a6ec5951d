package catalog

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/poligon/poligon/recipes"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/transcript"
	"github.com/poligon/poligon/scripts"
)

// The catalog's side of `poligon run`, `poligon check` and `poligon replay`.

// snapshot answers the current name -> script set.
func (ss *Catalog) snapshot() map[string]*Script {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	out := make(map[string]*Script, len(ss.byName))
	for k, v := range ss.byName {
		out[k] = v
	}
	return out
}

// ScriptReport is what `poligon check` says of one file.
type ScriptReport struct {
	File    string
	Name    string
	Kind    string // "tool vm_<name>" or "recipe"
	Problem error
}

// Check loads every script of dir as the server would (against the shipped
// scripts and recipes; reserved names the built-in tools) and reports on
// each file.
func Check(ctx context.Context, dir, stateDir string, reserved map[string]bool, log *slog.Logger) ([]ScriptReport, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	ss, err := Open(ctx, Options{Dir: dir, StateDir: stateDir, Logger: log, Reserved: reserved})
	if err != nil {
		return nil, err
	}
	defer ss.Close()
	srcs, err := dirSources(dir)
	if err != nil {
		return nil, err
	}
	var out []ScriptReport
	for _, src := range srcs {
		r := ScriptReport{File: src.file, Problem: ss.failed[src.file]}
		if sc, ok := ss.byFile[src.file]; ok && r.Problem == nil {
			r.Name, r.Kind = sc.Name, "recipe"
			if sc.Manifest().Tool {
				r.Kind = "tool vm_" + sc.Name
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// ReplayReport is what `poligon replay` found.
type ReplayReport struct {
	Script   string
	Calls    int
	Changed  bool // the script's source differs from the one recorded
	Value    []byte
	Finished bool // the script ended (well or not) without diverging
}

// Replay re-runs the script of a transcript against the recorded answers,
// with no machine: the same params, seed and clock, so the script must make
// the same calls in the same order. It fails at the first call that
// diverges and when the run ends with recorded calls left unmade.
func Replay(ctx context.Context, transcriptFile, scriptFile string, log *slog.Logger) (ReplayReport, error) {
	f, err := os.Open(transcriptFile)
	if err != nil {
		return ReplayReport{}, err
	}
	header, entries, err := transcript.Read(f)
	f.Close()
	if err != nil {
		return ReplayReport{}, fmt.Errorf("%s: %w", transcriptFile, err)
	}
	if scriptFile == "" {
		scriptFile = header.Script
	}
	data, err := readScriptSource(scriptFile)
	if err != nil {
		return ReplayReport{}, fmt.Errorf("the script of this transcript: %w (pass --script FILE)", err)
	}
	src := source{file: scriptFile, data: data}
	rep := ReplayReport{Script: scriptFile, Changed: src.sum() != header.SHA256}

	ss, err := Open(ctx, Options{Logger: log})
	if err != nil {
		return rep, err
	}
	defer ss.Close()
	sc, err := ss.compile(ctx, src)
	if err != nil {
		return rep, err
	}
	redact := transcript.WithRedact(secretRedactor(header.Params))
	player := transcript.NewReplayer(entries, redact)
	counted := &countingHost{next: player}
	res, runErr := sc.Module.Run(ctx, runtime.Run{
		Host: counted, Params: header.Params, VMID: header.VMID, Seed: header.Seed, Clock: header.Clock,
		Log: func(m string) { log.Info(m) },
	})
	rep.Calls, rep.Value = int(counted.n.Load()), res.Value
	// A divergence the script caught still counts: Done reports it.
	if err := player.Done(); err != nil {
		return rep, err
	}
	rep.Finished = true
	return rep, runErr // the recorded run's own failure, replayed
}

// readScriptSource reads a script file, or a shipped one ("shipped:x.js").
func readScriptSource(name string) ([]byte, error) {
	if rel, ok := strings.CutPrefix(name, "shipped:"); ok {
		for _, fsys := range []fs.FS{scripts.FS, recipes.FS} {
			if data, err := fs.ReadFile(fsys, rel); err == nil {
				return data, nil
			}
		}
		return nil, fmt.Errorf("no shipped script %s", rel)
	}
	return os.ReadFile(name)
}

// Prepare compiles a script file for one `poligon run` and checks it
// against the loaded set, as if it were in the scripts directory; it is
// not registered as a tool.
func (ss *Catalog) Prepare(ctx context.Context, file string, data []byte) (*Script, error) {
	sc, err := ss.compile(ctx, source{file: file, data: data})
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	ss.byName[sc.Name] = sc // this run only: no tool is registered
	ss.mu.Unlock()
	if problems := ss.check(ss.snapshot()); problems[sc.Name] != nil {
		return nil, problems[sc.Name]
	}
	return sc, nil
}

// Lookup answers a loaded script by name.
func (ss *Catalog) Lookup(name string) (*Script, bool) { return ss.lookup(name) }
