package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/poligon/poligon/engine"
)

const benchUsage = `usage: poligon bench VERB [args] [flags]

  status                          the benches, who holds them, the power of physical machines
  lease BENCH MINUTES             lease a bench (extends your own)
  release BENCH                   release your lease
  power BENCH status|on|off|off-hard|reset|cycle [--confirm]
  media BENCH list [--filter S] | mount (--image NAME | --storage S --path P) [--mode cd|flash] [--boot] [--confirm] | eject [--confirm]

The same tools an agent calls (bench_status, bench_lease, ...), run in this process as the config's owner.
`

// benchCmd: poligon bench VERB ..., the bench tools for a QA engineer at a
// terminal, through the same tool handlers an MCP client reaches.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, rest, fs, cf, ok := verbFlags("bench", benchUsage, args, stderr)
	if !ok {
		return exitError(2)
	}
	confirm := fs.Bool("confirm", false, "confirm a power or media action on a bench that asks for it")
	filter := fs.String("filter", "", "media list: only names containing this")
	image := fs.String("image", "", "media mount: an image on the device")
	storage := fs.String("storage", "", "media mount: an http storage to fetch the image from")
	path := fs.String("path", "", "media mount: the image's path under the storage")
	mode := fs.String("mode", "", "media mount: cd or flash")
	boot := fs.Bool("boot", false, "media mount: boot from it once")
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		return exitError(2)
	}
	tool, targs, ok := benchCall(verb, pos)
	if !ok {
		fs.Usage()
		return exitError(2)
	}
	for k, v := range map[string]any{"confirm": *confirm, "filter": *filter, "image": *image, "storage": *storage, "path": *path, "mode": *mode, "boot": *boot} {
		if v == false || v == "" {
			continue // not given
		}
		if !(tool == "bench_media" || tool == "bench_power" && k == "confirm") {
			fmt.Fprintf(stderr, "error: --%s is not for bench %s\n", k, verb)
			return exitError(2)
		}
		targs[k] = v
	}
	cfg, err := cf.load(stderr)
	if err != nil {
		return err
	}
	cfg.Server.Toolsets = []string{"bench"} // the command's own tools, whatever a server offers
	a, err := openApp(ctx, cfg, newLogger(stderr, "warn"))
	if err != nil {
		return err
	}
	defer a.Close()
	srv := engine.New(a)
	cs, closeCS, err := inProcessClient(ctx, srv)
	if err != nil {
		return err
	}
	defer closeCS()
	out, failed, err := callText(ctx, cs, tool, targs)
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

// verbFlags starts `poligon CMD VERB ...`: the verb, the arguments after
// it, and a flag set for them with the config flags registered; not ok
// (usage printed) when no verb is given.
func verbFlags(cmd, usage string, args []string, stderr io.Writer) (verb string, rest []string, fs *flag.FlagSet, cf *configFlags, ok bool) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return "", nil, nil, nil, false
	}
	fs = flag.NewFlagSet(cmd+" "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	cf = &configFlags{}
	cf.register(fs)
	return args[0], args[1:], fs, cf, true
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, and answers the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	return pos, nil
}

// benchCall maps a verb and its positional arguments to a tool call.
func benchCall(verb string, pos []string) (string, map[string]any, bool) {
	switch {
	case verb == "status" && len(pos) == 0:
		return "bench_status", map[string]any{}, true
	case verb == "lease" && len(pos) == 2:
		n, err := strconv.Atoi(pos[1])
		return "bench_lease", map[string]any{"bench": pos[0], "minutes": n}, err == nil
	case verb == "release" && len(pos) == 1:
		return "bench_release", map[string]any{"bench": pos[0]}, true
	case verb == "power" && len(pos) == 2:
		return "bench_power", map[string]any{"bench": pos[0], "action": pos[1]}, true
	case verb == "media" && len(pos) == 2:
		return "bench_media", map[string]any{"bench": pos[0], "action": pos[1]}, true
	}
	return "", nil, false
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
