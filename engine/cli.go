package engine

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/recipes"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/transcript"
	"github.com/poligon/poligon/runtime/wasm"
	"github.com/poligon/poligon/scripts"
)

// The commands of `poligon run`, `poligon check` and `poligon replay`.

// RunRequest is one `poligon run`.
type RunRequest struct {
	File     string            // the script file
	VMID     int               // run on this VM (the caller's) ...
	Template string            // ... or on a fresh linked clone of this template (name or vmid)
	Keep     bool              // keep that clone afterwards
	Params   map[string]string // the script's params
	Bench    string
	Hooks    RunHooks
	Progress func(format string, args ...any) // what the command is doing around the run
}

// RunFile runs a script file on a VM from a terminal: the scripts and
// recipes are loaded as the server loads them, then the file on top.
func (s *Server) RunFile(ctx context.Context, req RunRequest) (RunOutcome, error) {
	if s.scripts == nil {
		if err := s.LoadScripts(ctx); err != nil {
			return RunOutcome{}, err
		}
	}
	say := req.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	data, err := os.ReadFile(req.File)
	if err != nil {
		return RunOutcome{}, err
	}
	sc, err := s.scripts.compile(ctx, source{file: req.File, data: data})
	if err != nil {
		return RunOutcome{}, err
	}
	s.scripts.mu.Lock()
	s.scripts.byName[sc.name] = sc // this run only: no tool is registered
	s.scripts.mu.Unlock()
	if problems := s.scripts.check(s.scripts.snapshot()); problems[sc.name] != nil {
		return RunOutcome{}, problems[sc.name]
	}

	sess, err := s.Session(ctx, LocalCaller(s.cfg), req.Bench)
	if err != nil {
		return RunOutcome{}, err
	}
	vmid := req.VMID
	if req.Template != "" {
		vmid, err = s.freshVM(ctx, sess, req.Template, sc.name, say)
		// The clone is destroyed however the run ends (unless --keep): a
		// failed boot or a Ctrl-C must not leave it running.
		if vmid != 0 && !req.Keep {
			defer func() {
				if v, err := sess.VM(context.Background(), vmid); err == nil {
					say("destroying vmid %d (--keep keeps it)", vmid)
					v.Destroy(context.Background(), 50)
				}
			}()
		}
		if err != nil {
			return RunOutcome{}, err
		}
	}
	v, release, err := sess.LockVM(ctx, vmid)
	if err != nil {
		return RunOutcome{}, err
	}
	defer release()
	sess.ForScript()
	say("running %s on vmid %d (%s)", sc.name, vmid, v.Info().Name)
	out, err := s.scripts.Run(ctx, v, sc, req.Params, req.Hooks)
	if err == nil && out.Shot != nil && s.cfg.EvidenceDir != "" {
		path := fmt.Sprintf("run-%s-vm%d-%s.png", sc.name, vmid, time.Now().UTC().Format("20060102-150405"))
		if saved, serr := sess.SaveShot(*out.Shot, path); serr == nil {
			say("saved the last screenshot as %s", filepath.Join(s.cfg.EvidenceDir, saved))
		}
	}
	return out, err
}

// freshVM clones a template (by name or vmid), starts it and waits for its
// guest agent. Once the clone exists its vmid is answered, with or without
// an error, so the caller can remove it.
func (s *Server) freshVM(ctx context.Context, sess *hostapi.Session, template, script string, say func(string, ...any)) (int, error) {
	tpls, err := sess.Templates(ctx)
	if err != nil {
		return 0, err
	}
	tid := 0
	for _, t := range tpls {
		if t.Name == template || strconv.Itoa(t.VMID) == template {
			tid = t.VMID
		}
	}
	if tid == 0 {
		return 0, hostapi.Failf("poligon serve's vm_list_templates lists them; the local backend: make tiny-template", "no template %q", template)
	}
	name := fmt.Sprintf("run-%s-%d", strings.ReplaceAll(script, "_", "-"), time.Now().Unix()%1000000)
	say("cloning %s as %s", template, sess.VMName(name))
	res, err := sess.Clone(ctx, tid, name, false, "", 50)
	if err != nil {
		return 0, err
	}
	if err := res.Task.Err(); err != nil {
		return res.VMID, err
	}
	v, err := sess.VM(ctx, res.VMID)
	if err != nil {
		return res.VMID, err
	}
	say("starting vmid %d", res.VMID)
	if r, err := v.Start(ctx, 50); err != nil {
		return res.VMID, err
	} else if err := r.Err(); err != nil {
		return res.VMID, err
	}
	for i := 0; i < 6; i++ {
		ok, took, err := v.WaitBoot(ctx, 50)
		if err != nil {
			return res.VMID, err
		}
		if ok {
			say("booted in %.1f s", took.Seconds())
			return res.VMID, nil
		}
	}
	return res.VMID, hostapi.Failf("look at the VM's console (ui_screenshot) or its serial log", "vmid %d did not boot in 5 minutes", res.VMID)
}

// snapshot answers the current name -> script set.
func (ss *scriptSet) snapshot() map[string]*script {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	out := make(map[string]*script, len(ss.byName))
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

// CheckScripts loads every script of dir as the server would (against the
// shipped scripts and recipes) and reports on each file.
func CheckScripts(ctx context.Context, dir, stateDir string, log *slog.Logger) ([]ScriptReport, error) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	engine, err := wasm.NewEngine(ctx, wasm.Options{CacheDir: filepath.Join(stateDir, "wasm-cache"), Logger: log})
	if err != nil {
		return nil, err
	}
	defer engine.Close(ctx)
	ss, err := newScriptSet(ctx, log, engine, dir)
	if err != nil {
		return nil, err
	}
	ss.rescan(ctx)
	srcs, err := dirSources(dir)
	if err != nil {
		return nil, err
	}
	var out []ScriptReport
	for _, src := range srcs {
		r := ScriptReport{File: src.file, Problem: ss.problems[src.file]}
		if sc, ok := ss.byFile[src.file]; ok && r.Problem == nil {
			r.Name, r.Kind = sc.name, "recipe"
			if sc.manifest().Tool {
				r.Kind = "tool vm_" + sc.name
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

	engine, err := wasm.NewEngine(ctx, wasm.Options{Logger: log})
	if err != nil {
		return rep, err
	}
	defer engine.Close(ctx)
	ss, err := newScriptSet(ctx, log, engine, "")
	if err != nil {
		return rep, err
	}
	sc, err := ss.compile(ctx, src)
	if err != nil {
		return rep, err
	}
	redact := transcript.WithRedact(secretRedactor(header.Params))
	player := transcript.NewReplayer(entries, redact)
	counted := &countingHost{next: player}
	res, runErr := sc.module.Run(ctx, runtime.Run{
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
