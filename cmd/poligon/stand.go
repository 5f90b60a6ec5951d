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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/engine"
)

const standUsage = `usage: poligon stand VERB [args] [flags]

  plan "GOAL"                     ask the planner model for a plan (prints it)
  plan --prompt                   print the planner's system prompt (sends nothing, needs no goal)
  apply PLAN.json [--wait]        build a stand: in the background (a detached poligon), or here with a live view (--wait)
  apply --resume NAME [--wait]    continue an interrupted or failed stand
  status [NAME]                   a stand's progress, or the list of your stands
  destroy NAME [--force]          destroy the stand's VMs (--force stops a build first)
  compile PLAN.json               print the JavaScript module the plan compiles to

The same tools an agent calls (stand_plan, stand_apply, ...), run in this process as the config's owner.
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
	cfg.Server.Toolsets = []string{"stand"} // the command's own tools, whatever a server offers
	// Ctrl-C (or a stop) interrupts a build here as a server's shutdown
	// does: the stand is left interrupted, for --resume.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := newLogger(stderr, "warn")
	srv, closeSrv, err := openServer(cfg, log)
	if err != nil {
		return err
	}
	defer closeSrv()
	if err := srv.LoadScripts(ctx); err != nil {
		return err
	}
	switch verb {
	case "compile":
		plan, err := os.ReadFile(pos[0])
		if err != nil {
			return err
		}
		js, err := srv.CompileStand(ctx, plan, *bench)
		if err != nil {
			return printToolError(stderr, err)
		}
		_, err = stdout.Write(js)
		return err
	case "plan":
		if *prompt {
			p, err := srv.StandPrompt(ctx, *bench)
			if err != nil {
				return printToolError(stderr, err)
			}
			fmt.Fprintln(stdout, p)
			return nil
		}
	case "apply":
		if !*wait {
			return applyDetached(ctx, srv, pos, *resume, *bench, os.Args[0], cf, stdout, stderr)
		}
	}

	cs, closeCS, err := inProcessClient(ctx, srv)
	if err != nil {
		return err
	}
	defer closeCS()
	call := func(tool string, targs map[string]any) (string, bool, error) {
		if *bench != "" {
			targs["bench"] = *bench
		}
		return callText(ctx, cs, tool, targs)
	}
	var out string
	var failed bool
	switch verb {
	case "plan":
		out, failed, err = call("stand_plan", map[string]any{"goal": pos[0]})
	case "status":
		targs := map[string]any{}
		if len(pos) == 1 {
			targs["stand"] = pos[0]
		}
		out, failed, err = call("stand_status", targs)
	case "destroy":
		out, failed, err = call("stand_destroy", map[string]any{"stand": pos[0], "confirm": true, "force": *force})
	case "apply":
		targs, err := applyArgs(pos, *resume)
		if err != nil {
			return err
		}
		out, failed, err = call("stand_apply", targs)
		if err != nil || failed {
			break
		}
		var started struct{ Stand string }
		json.Unmarshal([]byte(out), &started)
		fmt.Fprintln(stderr, strings.TrimSpace(out))
		return followStand(ctx, func() (string, bool, error) {
			return call("stand_status", map[string]any{"stand": started.Stand})
		}, stdout, stderr)
	}
	if err != nil {
		return err
	}
	if failed {
		fmt.Fprintln(stderr, out)
		return exitError(1)
	}
	fmt.Fprintln(stdout, out)
	return nil
}

func printToolError(stderr io.Writer, err error) error {
	fmt.Fprintln(stderr, engine.ErrorText(err))
	return exitError(1)
}

// applyArgs are stand_apply's arguments from the command line.
func applyArgs(pos []string, resume string) (map[string]any, error) {
	if resume != "" {
		return map[string]any{"stand": resume, "resume": true}, nil
	}
	plan, err := os.ReadFile(pos[0])
	if err != nil {
		return nil, err
	}
	if !json.Valid(plan) {
		// Passed as a string, so the validator answers as it does to a model.
		return map[string]any{"plan": string(plan)}, nil
	}
	return map[string]any{"plan": json.RawMessage(plan)}, nil
}

// applyDetached checks the plan here, then hands the build to a detached
// `poligon stand apply --wait` whose output goes to a log beside the
// store, and answers once that process has recorded the stand.
func applyDetached(ctx context.Context, srv *engine.Server, pos []string, resume, bench, self string, cf *configFlags, stdout, stderr io.Writer) error {
	name := resume
	if resume == "" {
		plan, err := os.ReadFile(pos[0])
		if err != nil {
			return err
		}
		if _, err := srv.CompileStand(ctx, plan, bench); err != nil {
			return printToolError(stderr, err)
		}
		var p struct{ Name string }
		json.Unmarshal(plan, &p)
		name = p.Name
	}
	stateDir := srv.Config().StateDir
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
		exe = self
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
		if pid := cmd.Process.Pid; srv.StandBuiltBy(ctx, bench, name, pid) {
			cmd.Process.Release()
			fmt.Fprintf(stdout, "{\"ok\": true, \"stand\": %q, \"status\": \"running\"}\n", name)
			fmt.Fprintf(stderr, "building in the background (pid %d, log %s); follow with: poligon stand status %s\n", pid, logPath, name)
			return nil
		}
	}
}

// followStand polls stand_status and prints each machine's progress as it
// changes, until the stand stops; the exit status says how it ended.
func followStand(ctx context.Context, status func() (string, bool, error), stdout, stderr io.Writer) error {
	last := map[string]string{}
	for {
		out, failed, err := status()
		if err != nil {
			return err
		}
		if failed {
			fmt.Fprintln(stderr, out)
			return exitError(1)
		}
		var v engine.StandView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return err
		}
		for _, m := range v.Machines {
			line := machineLine(m)
			if last[m.Role] != line {
				last[m.Role] = line
				fmt.Fprintf(stderr, "%6.1fs  %s\n", v.Seconds, line)
			}
		}
		if v.Status != "running" {
			fmt.Fprintln(stdout, out)
			if v.Status != "done" {
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
func machineLine(m engine.MachineView) string {
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

// inProcessClient connects an MCP client to srv in this process.
func inProcessClient(ctx context.Context, srv *engine.Server) (*mcp.ClientSession, func(), error) {
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		return nil, nil, err
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "poligon-cli", Version: engine.Version}, nil).Connect(ctx, ct, nil)
	if err != nil {
		ss.Close()
		return nil, nil, err
	}
	return cs, func() { cs.Close(); ss.Close() }, nil
}

// callText calls a tool and answers its text and whether it failed.
func callText(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", false, err
	}
	var out []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			out = append(out, t.Text)
		}
	}
	return strings.Join(out, "\n"), res.IsError, nil
}
