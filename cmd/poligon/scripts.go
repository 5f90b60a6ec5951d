package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/poligon/poligon/engine"
	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
)

// runScript: poligon run SCRIPT (--vm N | --template T) [--param k=v ...]
func runScript(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: poligon run SCRIPT (--vm N | --template T) [--param k=v ...] [--bench B] [--keep]")
		fs.PrintDefaults()
	}
	var cf configFlags
	cf.register(fs)
	vm := fs.Int("vm", 0, "run on this VM (one of yours)")
	template := fs.String("template", "", "run on a fresh linked clone of this template (name or vmid), destroyed afterwards")
	keep := fs.Bool("keep", false, "with --template: keep the clone")
	bench := fs.String("bench", "", "the bench (default: the config's default bench)")
	var params stringList
	fs.Var(&params, "param", "a script param, k=v (repeatable)")
	file, rest := splitFirstArg(args)
	if err := fs.Parse(rest); err != nil {
		return exitError(2)
	}
	if file == "" || (*vm == 0) == (*template == "") || fs.NArg() > 0 {
		fs.Usage()
		return exitError(2)
	}
	p := map[string]string{}
	for _, kv := range params {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--param %q: want k=v", kv)
		}
		p[k] = v
	}
	cfg, err := cf.load(stderr)
	if err != nil {
		return err
	}
	log := newLogger(stderr, "warn")
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := openApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	start := time.Now()
	stamp := func() string { return fmt.Sprintf("[%6.2fs]", time.Since(start).Seconds()) }
	out, err := a.RunFile(ctx, app.RunRequest{
		File: file, VMID: *vm, Template: *template, Keep: *keep, Params: p, Bench: *bench,
		Progress: func(format string, args ...any) {
			fmt.Fprintf(stderr, "%s %s\n", stamp(), fmt.Sprintf(format, args...))
		},
		Hooks: catalog.RunHooks{
			Log: func(msg string, args ...any) { fmt.Fprintf(stderr, "%s   %s%s\n", stamp(), msg, kvText(args)) },
			Step: func(call string, args, answer json.RawMessage, err error, took time.Duration) {
				result := "ok"
				if err != nil {
					result = "error: " + err.Error()
				}
				fmt.Fprintf(stderr, "%s   %s %s -> %s (%.0f ms)\n", stamp(), call, clip(string(args), 120), clip(result, 160), took.Seconds()*1000)
			},
		},
	})
	if out.Transcript != "" {
		fmt.Fprintf(stderr, "%s transcript %s (poligon replay re-runs it without a machine)\n", stamp(), out.Transcript)
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		if hint := hostapi.HintOf(err); hint != "" {
			fmt.Fprintf(stderr, "hint: %s\n", hint)
		}
		return exitError(1)
	}
	fmt.Fprintf(stderr, "%s ok: %d host calls in %.1f s\n", stamp(), out.Calls, out.Elapsed.Seconds())
	printValue(stdout, out.Value)
	return nil
}

// checkScripts: poligon check DIR
func checkScripts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	dir, rest := splitFirstArg(args)
	if err := fs.Parse(rest); err != nil || dir == "" {
		fmt.Fprintln(stderr, "usage: poligon check DIR")
		return exitError(2)
	}
	cfg, err := cf.load(stderr)
	if err != nil {
		return err
	}
	reports, err := catalog.Check(ctx, dir, cfg.StateDir, engine.BuiltinNames(), newLogger(io.Discard, "error"))
	if err != nil {
		return err
	}
	bad := 0
	for _, r := range reports {
		if r.Problem != nil {
			bad++
			fmt.Fprintf(stdout, "error  %s: %v\n", r.File, r.Problem)
			continue
		}
		fmt.Fprintf(stdout, "ok     %s: %s (%s)\n", r.File, r.Name, r.Kind)
	}
	fmt.Fprintf(stdout, "%d scripts, %d with problems\n", len(reports), bad)
	if bad > 0 {
		return exitError(1)
	}
	return nil
}

// replay: poligon replay TRANSCRIPT [--script FILE]
func replay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	script := fs.String("script", "", "the script to replay (default: the file the transcript names)")
	file, rest := splitFirstArg(args)
	if err := fs.Parse(rest); err != nil || file == "" {
		fmt.Fprintln(stderr, "usage: poligon replay TRANSCRIPT [--script FILE]")
		return exitError(2)
	}
	rep, err := catalog.Replay(ctx, file, *script, newLogger(stderr, "warn"))
	if rep.Changed {
		fmt.Fprintf(stderr, "note: %s changed since the transcript was recorded\n", rep.Script)
	}
	if !rep.Finished {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitError(1)
	}
	if err != nil {
		fmt.Fprintf(stdout, "replayed %d calls clean; the run failed as recorded: %v\n", rep.Calls, err)
		return nil
	}
	fmt.Fprintf(stdout, "replayed %d calls clean\n", rep.Calls)
	printValue(stdout, rep.Value)
	return nil
}

// splitFirstArg takes the positional argument that comes first, so flags may
// follow it (poligon run login.js --vm 100).
func splitFirstArg(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

func printValue(w io.Writer, v json.RawMessage) {
	if len(v) == 0 || string(v) == "null" {
		return
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		fmt.Fprintln(w, s)
		return
	}
	fmt.Fprintln(w, string(v))
}

func kvText(args []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i], args[i+1])
	}
	return b.String()
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
