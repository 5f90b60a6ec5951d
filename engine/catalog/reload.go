package catalog

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/poligon/poligon/runtime/wasm"
)

// Open loads the shipped scripts and recipes and those of opts.Dir, and
// tells opts.Tools of every tool script. A shipped script that fails to load
// is a bug (an error here); a file of the directory that fails is reported
// (log, Tools.SetProblem) and skipped. Close releases the Wasm engine.
func Open(ctx context.Context, opts Options) (*Catalog, error) {
	cacheDir := ""
	if opts.StateDir != "" {
		cacheDir = filepath.Join(opts.StateDir, "wasm-cache")
	}
	engine, err := wasm.NewEngine(ctx, wasm.Options{CacheDir: cacheDir, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	ss := &Catalog{problems: opts.Problems, trace: opts.Trace, log: opts.Logger, wasm: engine, dir: opts.Dir, stateDir: opts.StateDir,
		limits: opts.Limits, reserved: opts.Reserved,
		byName: map[string]*Script{}, shipped: map[string]*Script{}, byFile: map[string]*Script{}, failed: map[string]error{}}
	if err := ss.loadShipped(ctx); err != nil {
		engine.Close(ctx)
		return nil, err
	}
	ss.rescan(ctx)
	return ss, nil
}

// Subscribe makes t hear of tool scripts: at once of every one loaded, then
// of each that comes, changes or goes. One subscriber at a time (the MCP
// server); a new one replaces the last.
func (ss *Catalog) Subscribe(t Tools) {
	ss.mu.Lock()
	ss.tools = t
	var loaded []*Script
	for _, sc := range ss.byName {
		if sc.Manifest().Tool {
			loaded = append(loaded, sc)
		}
	}
	ss.mu.Unlock()
	for _, sc := range loaded {
		t.AddScript(sc)
	}
}

// Close releases the compiled Wasm modules.
func (ss *Catalog) Close() { ss.wasm.Close(context.Background()) }

// loadShipped compiles the embedded scripts and recipes.
func (ss *Catalog) loadShipped(ctx context.Context) error {
	srcs, err := shippedSources()
	if err != nil {
		return err
	}
	for _, src := range srcs {
		sc, err := ss.compile(ctx, src)
		if err != nil {
			return fmt.Errorf("shipped script %s: %w", src.file, err)
		}
		if other, dup := ss.shipped[sc.Name]; dup {
			return fmt.Errorf("shipped scripts %s and %s share the name %s", other.File, sc.File, sc.Name)
		}
		ss.shipped[sc.Name] = sc
	}
	for name, err := range ss.check(ss.shipped) {
		return fmt.Errorf("shipped script %s: %w", name, err)
	}
	ss.byName = maps.Clone(ss.shipped)
	return nil
}

// rescan brings the loaded set in line with the scripts directory: new and
// changed files are compiled and checked, removed ones dropped. A file that
// fails keeps its previous version live. Tools are added, replaced or
// removed to match; the MCP server tells clients (list_changed).
func (ss *Catalog) rescan(ctx context.Context) {
	srcs, err := dirSources(ss.dir)
	if err != nil {
		ss.log.Warn("scripts directory unreadable", "dir", ss.dir, "err", err)
		ss.setProblem("scripts directory", err.Error())
		return
	}
	ss.setProblem("scripts directory", "")
	ss.mu.RLock()
	current := maps.Clone(ss.byFile)
	ss.mu.RUnlock()

	next := map[string]*Script{} // by file
	problems := map[string]error{}
	for _, src := range srcs {
		cur, had := current[src.file]
		if had && cur.Sum == src.sum() {
			next[src.file] = cur
			continue
		}
		sc, err := ss.compile(ctx, src)
		if err != nil {
			problems[src.file] = err
			if had {
				next[src.file] = cur // the previous version stays live
			}
			continue
		}
		next[src.file] = sc
	}

	// Settle: drop duplicates and scripts the set rejects, falling back to
	// a file's previous version, until the set checks clean.
	for pass := 0; pass < 8; pass++ {
		set, owner := ss.merge(next)
		dup := duplicates(next)
		bad := ss.check(set)
		if len(dup) == 0 && len(bad) == 0 {
			break
		}
		for file, err := range dup {
			problems[file] = err
			ss.revert(next, current, file)
		}
		for name, err := range bad {
			file := owner[name]
			if file == "" {
				ss.log.Error("a shipped script no longer checks against the directory's", "script", name, "err", err)
				continue
			}
			problems[file] = err
			ss.revert(next, current, file)
		}
	}
	added := ss.apply(next, problems)
	// A script that requires another added in the same scan failed to
	// compile before that one was live: try the failed ones once more.
	if len(problems) > 0 && added > 0 && !ss.retrying {
		ss.retrying = true
		ss.rescan(ctx)
		ss.retrying = false
	}
}

// merge answers the name -> script set (shipped, overridden by the
// directory's) and which file each name came from ("" for shipped).
func (ss *Catalog) merge(dir map[string]*Script) (map[string]*Script, map[string]string) {
	set := maps.Clone(ss.shipped)
	owner := map[string]string{}
	files := make([]string, 0, len(dir))
	for f := range dir {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		sc := dir[f]
		set[sc.Name] = sc
		owner[sc.Name] = f
	}
	return set, owner
}

// duplicates reports the files of the directory that share a name, except
// the one already registered under it.
func duplicates(dir map[string]*Script) map[string]error {
	byName := map[string][]string{}
	for f, sc := range dir {
		byName[sc.Name] = append(byName[sc.Name], f)
	}
	out := map[string]error{}
	for name, files := range byName {
		if len(files) < 2 {
			continue
		}
		sort.Strings(files)
		for _, f := range files[1:] {
			out[f] = fmt.Errorf("name %s is taken by %s", name, filepath.Base(files[0]))
		}
	}
	return out
}

// revert puts a file back to its previous version, or drops it when it had
// none (or the previous one is what failed).
func (ss *Catalog) revert(next, current map[string]*Script, file string) {
	if cur, ok := current[file]; ok && next[file] != cur {
		next[file] = cur
		return
	}
	delete(next, file)
}

// apply installs the settled set and registers its tools; it answers how
// many scripts are new or changed.
func (ss *Catalog) apply(next map[string]*Script, problems map[string]error) int {
	set, _ := ss.merge(next)
	ss.mu.Lock()
	old := ss.byName
	ss.byName, ss.byFile = set, next
	oldProblems := ss.failed
	ss.failed = problems
	ss.mu.Unlock()

	changed := 0
	for name, sc := range set {
		if prev, ok := old[name]; ok && prev == sc {
			continue
		}
		changed++
		if sc.Manifest().Tool {
			ss.addTool(sc)
			ss.log.Info("script tool loaded", "tool", "vm_"+name, "file", sc.File)
		} else if prev, ok := old[name]; ok && prev.Manifest().Tool {
			ss.removeTool(name)
		}
	}
	for name, prev := range old {
		if _, still := set[name]; !still && prev.Manifest().Tool {
			ss.removeTool(name)
			ss.log.Info("script tool removed", "tool", "vm_"+name, "file", prev.File)
		}
	}
	for file := range oldProblems {
		if _, still := problems[file]; !still {
			ss.setProblem("script "+file, "")
		}
	}
	for file, err := range problems {
		ss.setProblem("script "+file, oneLine(err.Error()))
		ss.log.Warn("script not loaded; the previous version (if any) stays live", "file", file, "err", err)
	}
	return changed
}

// The subscriber's hooks; a catalog without one (check, replay) has no
// tools.
func (ss *Catalog) subscriber() Tools {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return ss.tools
}

func (ss *Catalog) addTool(sc *Script) {
	if t := ss.subscriber(); t != nil {
		t.AddScript(sc)
	}
}

func (ss *Catalog) removeTool(name string) {
	if t := ss.subscriber(); t != nil {
		t.RemoveScript(name)
	}
}

func (ss *Catalog) setProblem(source, problem string) {
	if ss.problems != nil {
		ss.problems(source, problem)
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// debounce is how long the watcher waits for a burst of events (an editor's
// save, an atomic rename) to end before it rescans.
const debounce = 100 * time.Millisecond

// Watch rescans the scripts directory whenever it changes, until ctx ends.
// Watching the directory (not the files) sees in-place writes, atomic
// renames, vim-style saves and deletes alike.
func (ss *Catalog) Watch(ctx context.Context) error {
	if ss.dir == "" {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(ss.dir); err != nil {
		w.Close()
		return fmt.Errorf("watch %s: %w", ss.dir, err)
	}
	go func() {
		defer w.Close()
		var timer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op == fsnotify.Chmod || !isScriptFile(ev.Name) {
					continue
				}
				timer = time.After(debounce)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				ss.log.Warn("scripts watcher", "err", err)
				timer = time.After(debounce)
			case <-timer:
				timer = nil
				ss.rescan(ctx)
			}
		}
	}()
	return nil
}
