package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/store"
)

const standUsage = `usage: poligon stand VERB [args] [flags]

  plan "GOAL"                     ask the planner model for a plan (prints it)
  plan --prompt                   print the planner's system prompt (sends nothing, needs no goal)
  apply PLAN.json [--wait]        build a stand: in the background (a detached poligon), or here with a live view (--wait)
  apply --resume NAME [--wait]    continue an interrupted or failed stand
  status [NAME]                   a stand's progress, or the list of your stands
  destroy NAME [--force]          destroy the stand's VMs (--force stops a build first)
  compile PLAN.json               print the JavaScript module the plan compiles to

The stand service behind the stand_* tools, run in this process as the config's owner.
`

// standCmd: poligon stand VERB ..., the stand tools at a terminal.
func standCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, rest, fs, cf, ok := verbFlags("stand", standUsage, args, stderr)
	if !ok {
		return exitError(2)
	}
	wait := fs.Bool("wait", false, "apply: build in this process, showing each machine's progress, until the stand is done or failed")
	resume := fs.String("resume", "", "apply: continue this stand instead of a new plan")
	force := fs.Bool("force", false, "destroy: stop a build in progress first")
	prompt := fs.Bool("prompt", false, "plan: print the planner's system prompt and send nothing")
	bench := fs.String("bench", "", "the bench (default: the config's default)")
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		return exitError(2)
	}
	need := map[string][2]int{"plan": {1, 1}, "apply": {0, 1}, "status": {0, 1}, "destroy": {1, 1}, "compile": {1, 1}}
	if *prompt && verb == "plan" {
		need["plan"] = [2]int{0, 1} // the prompt needs no goal (one given is ignored)
	}
	n, ok := need[verb]
	if !ok || len(pos) < n[0] || len(pos) > n[1] || verb == "apply" && (len(pos) == 1) == (*resume != "") {
		fs.Usage()
		return exitError(2)
	}
	cfg, err := cf.load(stderr)
	if err != nil {
		return err
	}
	// Ctrl-C (or a stop) interrupts a build here as a server's shutdown
	// does: the stand is left interrupted, for --resume.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := openApp(ctx, cfg, newLogger(stderr, "warn"))
	if err != nil {
		return err
	}
	defer a.Close()
	who, benchName, err := ownerOn(ctx, a, *bench)
	if err != nil {
		return printToolError(stderr, err)
	}
	stands := a.Stands
	var out any
	switch verb {
	case "compile":
		plan, err := os.ReadFile(pos[0])
		if err != nil {
			return err
		}
		js, err := stands.CompilePlan(ctx, who, benchName, plan)
		if err != nil {
			return printToolError(stderr, err)
		}
		_, err = stdout.Write(js)
		return err
	case "plan":
		if *prompt {
			p, err := stands.Prompt(ctx, who, benchName)
			if err != nil {
				return printToolError(stderr, err)
			}
			fmt.Fprintln(stdout, p)
			return nil
		}
		ans, err := stands.Plan(ctx, who, benchName, pos[0])
		if err != nil {
			return printToolError(stderr, err)
		}
		if !ans.OK || !ans.Valid {
			fmt.Fprintln(stderr, jsonText(ans))
			return exitError(1)
		}
		out = ans
	case "status":
		name := ""
		if len(pos) == 1 {
			name = pos[0]
		}
		if out, err = stands.Status(ctx, who, benchName, name); err != nil {
			return printToolError(stderr, err)
		}
	case "destroy":
		d, err := stands.Destroy(ctx, who, benchName, pos[0], *force)
		if err != nil {
			return printToolError(stderr, err)
		}
		ans := map[string]any{"ok": len(d.Failed) == 0, "destroyed": append([]int{}, d.VMIDs...), "failed": append([]map[string]any{}, d.Failed...)}
		if len(d.Failed) > 0 {
			fmt.Fprintln(stderr, jsonText(ans))
			return exitError(1)
		}
		out = ans
	case "apply":
		if !*wait {
			return applyDetached(ctx, a, who, benchName, pos, *resume, cf, stdout, stderr)
		}
		req, err := applyRequest(pos, *resume, benchName)
		if err != nil {
			return err
		}
		name, err := stands.Apply(ctx, who, a.Local(), req)
		if err != nil {
			return printToolError(stderr, err)
		}
		fmt.Fprintf(stderr, "{\"ok\": true, \"stand\": %q, \"status\": \"running\"}\n", name)
		return followStand(ctx, func() (stand.View, error) {
			v, err := stands.Status(ctx, who, benchName, name)
			if err != nil {
				return stand.View{}, err
			}
			return v.(stand.View), nil
		}, stdout, stderr)
	}
	fmt.Fprintln(stdout, jsonText(out))
	return nil
}

// printToolError prints an error as a tool answers it: error: ... and a
// hint: ... line.
func printToolError(stderr io.Writer, err error) error {
	fmt.Fprintf(stderr, "error: %v\n", err)
	if hint := hostapi.HintOf(err); hint != "" {
		fmt.Fprintf(stderr, "hint: %s\n", hint)
	}
	return exitError(1)
}

// jsonText is an answer as the stand tools give it: indented JSON.
func jsonText(v any) string {
	raw, _ := json.MarshalIndent(v, "", "  ")
	return string(raw)
}

// applyRequest is the Apply of the command line: a plan file, or a stand
// to resume.
func applyRequest(pos []string, resume, bench string) (stand.Apply, error) {
	if resume != "" {
		return stand.Apply{Stand: resume, Resume: true, Bench: bench}, nil
	}
	plan, err := os.ReadFile(pos[0])
	if err != nil {
		return stand.Apply{}, err
	}
	if !json.Valid(plan) {
		// Passed as a string, so the validator answers as it does to a model.
		plan, _ = json.Marshal(string(plan))
	}
	return stand.Apply{Plan: plan, Bench: bench}, nil
}

// applyDetached checks the plan here, then hands the build to a detached
// `poligon stand apply --wait` whose output goes to a log beside the
// store, and answers once that process has recorded the stand.
func applyDetached(ctx context.Context, a *app.App, who *hostapi.Caller, bench string, pos []string, resume string, cf *configFlags, stdout, stderr io.Writer) error {
	name := resume
	if resume == "" {
		plan, err := os.ReadFile(pos[0])
		if err != nil {
			return err
		}
		if _, err := a.Stands.CompilePlan(ctx, who, bench, plan); err != nil {
			return printToolError(stderr, err)
		}
		var p struct{ Name string }
		json.Unmarshal(plan, &p)
		name = p.Name
	}
	stateDir := a.Config.StateDir
	if stateDir == "" {
		return printToolError(stderr, fmt.Errorf("stands need a state directory (state_dir in the config, or POLIGON_STATE)"))
	}
	logDir := filepath.Join(stateDir, "stands")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"stand", "apply", "--wait"}
	args = append(args, cf.args()...)
	if bench != "" {
		args = append(args, "--bench", bench)
	}
	if resume != "" {
		args = append(args, "--resume", resume)
	} else {
		abs, _ := filepath.Abs(pos[0])
		args = append(args, abs)
	}
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives this terminal
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case err := <-exited:
			data, _ := os.ReadFile(logPath)
			fmt.Fprint(stderr, string(data))
			if err != nil {
				return exitError(1)
			}
			return nil
		case <-deadline:
			fmt.Fprintf(stderr, "error: the build process (pid %d) has not started stand %s within 60 s\nhint: its log is %s\n", cmd.Process.Pid, name, logPath)
			return exitError(1)
		case <-time.After(300 * time.Millisecond):
		}
		if pid := cmd.Process.Pid; a.Stands.BuiltBy(ctx, who, bench, name, pid) {
			cmd.Process.Release()
			fmt.Fprintf(stdout, "{\"ok\": true, \"stand\": %q, \"status\": \"running\"}\n", name)
			fmt.Fprintf(stderr, "building in the background (pid %d, log %s); follow with: poligon stand status %s\n", pid, logPath, name)
			return nil
		}
	}
}

// followStand reads the stand's status every second and prints each
// machine's progress as it changes, until the stand stops; the exit status
// says how it ended.
func followStand(ctx context.Context, status func() (stand.View, error), stdout, stderr io.Writer) error {
	last := map[string]string{}
	for {
		v, err := status()
		if err != nil {
			return printToolError(stderr, err)
		}
		for _, m := range v.Machines {
			line := machineLine(m)
			if last[m.Role] != line {
				last[m.Role] = line
				fmt.Fprintf(stderr, "%6.1fs  %s\n", v.Seconds, line)
			}
		}
		if v.Status != store.StandRunning {
			fmt.Fprintln(stdout, jsonText(v))
			if v.Status != store.StandDone {
				return exitError(1)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// machineLine is one machine's state in a line.
func machineLine(m stand.MachineView) string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "%-10s %-9s", m.Role, m.Status)
	if m.VMID != 0 {
		fmt.Fprintf(b, " vmid %d", m.VMID)
	}
	if m.IP != "" {
		fmt.Fprintf(b, " %s", m.IP)
	}
	done := 0
	for _, s := range m.Steps {
		if s.Status == "done" {
			done++
		}
		if s.Status == "running" || s.Status == "failed" {
			fmt.Fprintf(b, "  step %d/%d %s: %s", s.N, len(m.Steps), s.Status, s.Label)
		}
	}
	fmt.Fprintf(b, "  [%d/%d steps]", done, len(m.Steps))
	if m.Error != "" {
		fmt.Fprintf(b, "\n           %s", m.Error)
	}
	return b.String()
}
