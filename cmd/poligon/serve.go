package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/engine"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/web"
)

// common flags of every command that reads the config.
type configFlags struct {
	path        string
	evidenceDir string
	scriptsDir  string
	dataDir     string
}

// args answers the flags as given, for a child poligon.
func (c *configFlags) args() []string {
	var out []string
	for _, f := range []struct{ name, v string }{{"config", c.path}, {"evidence-dir", c.evidenceDir}, {"scripts", c.scriptsDir}, {"data-dir", c.dataDir}} {
		if f.v != "" {
			abs, err := filepath.Abs(f.v)
			if err != nil {
				abs = f.v
			}
			out = append(out, "--"+f.name, abs)
		}
	}
	return out
}

func (c *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "config", "", "config file (default $XDG_CONFIG_HOME/poligon/config.toml)")
	fs.StringVar(&c.evidenceDir, "evidence-dir", "", "directory screenshots' path= may write into (POLIGON_MCP_EVIDENCE)")
	fs.StringVar(&c.scriptsDir, "scripts", "", "extra scripts directory, watched (POLIGON_MCP_SCENARIOS)")
	fs.StringVar(&c.dataDir, "data-dir", "", "the local backend's data directory (POLIGON_DATA)")
}

// load reads the config; flags override the file and the environment.
func (c *configFlags) load(stderr io.Writer) (*config.Config, error) {
	path, explicit := c.path, c.path != ""
	if !explicit {
		path = config.DefaultPath()
	}
	env := func(name string) string {
		switch {
		case name == "POLIGON_MCP_EVIDENCE" && c.evidenceDir != "":
			return c.evidenceDir
		case name == "POLIGON_MCP_SCENARIOS" && c.scriptsDir != "":
			return c.scriptsDir
		case name == "POLIGON_DATA" && c.dataDir != "":
			return c.dataDir
		}
		return os.Getenv(name)
	}
	cfg, problems := config.Load(path, explicit, env)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintf(stderr, "error: %v\n", p)
		}
		fmt.Fprintln(stderr, "hint: poligon config check prints the effective config; fix the config or the environment and start again")
		return nil, exitError(2)
	}
	return cfg, nil
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	stdio := fs.Bool("stdio", false, "serve MCP over stdin/stdout instead of HTTP")
	bind := fs.String("bind", "", "HTTP address (default 127.0.0.1:8811; POLIGON_MCP_BIND)")
	var hosts stringList
	fs.Var(&hosts, "allowed-host", "a Host value accepted besides loopback (repeatable; * any; POLIGON_MCP_ALLOWED_HOSTS)")
	toolsets := fs.String("toolsets", "", "the tool families to offer, comma-separated: "+strings.Join(config.Toolsets, ",")+" (default: all the benches can serve; POLIGON_MCP_TOOLSETS)")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	cfg, err := cf.load(stderr)
	if err != nil {
		return err
	}
	if err := requireOutboundCAs(stderr); err != nil {
		return err
	}
	if *bind != "" {
		cfg.Server.Bind = *bind
	}
	cfg.Server.AllowedHosts = append(cfg.Server.AllowedHosts, hosts...)
	if *toolsets != "" {
		cfg.Server.Toolsets = strings.Split(*toolsets, ",")
		if problems := cfg.Check(); len(problems) > 0 {
			fmt.Fprintf(stderr, "error: --toolsets: %v\n", errors.Join(problems...))
			return exitError(2)
		}
	}
	// Logs go to stderr: in stdio mode stdout belongs to the protocol.
	log, closeLogs, err := openLogs(cfg, stderr)
	if err != nil {
		return err
	}
	defer closeLogs()
	transport := "http"
	if *stdio {
		transport = "stdio"
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := openApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	srv := engine.New(a)
	// A new, changed or removed script adds, replaces or removes its tool.
	if err := a.Scripts.Watch(ctx); err != nil {
		return err
	}
	b := engine.BuildInfo()
	log.Info("poligon starting", "version", b.Version, "commit", b.Commit, "clean", b.Clean, "transport", transport, "benches", len(cfg.Benches), "tools", len(srv.ToolNames()))
	for name, facts := range a.BenchFacts() {
		args := []any{"bench", name}
		for _, k := range slices.Sorted(maps.Keys(facts)) {
			args = append(args, k, facts[k])
		}
		log.Info("bench", args...)
	}
	eyesArgs := []any{}
	report := a.EyesReport()
	for _, k := range slices.Sorted(maps.Keys(report)) {
		eyesArgs = append(eyesArgs, k, report[k])
	}
	// The OCR engines start on the first screen read, not here: loaded,
	// libtesseract and its models hold some 50 MB a server that never
	// reads the screen has no use for (the report above loads nothing).
	log.Info("eyes", eyesArgs...)
	for _, p := range a.Problems() {
		log.Warn("not ready", "problem", p)
	}
	if *stdio {
		err := srv.MCP().Run(ctx, &mcp.StdioTransport{})
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		shutdown(srv, cfg, log)
		return err
	}
	if len(cfg.Tokens) == 0 {
		log.Warn("no [[token]] in the config: over HTTP only Proxmox benches (X-PVE-Token) can be used; see the README's Connecting section")
	}
	ln, err := net.Listen("tcp", cfg.Server.Bind)
	if err != nil {
		return err
	}
	// The browser views beside /mcp, on the same listener and behind the
	// same Host guard; the MCP door answers everything else.
	mux := http.NewServeMux()
	mux.Handle("/ui/", web.New(a, web.Options{}).Handler())
	mux.Handle("/", srv.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("poligon listening", "addr", ln.Addr().String(), "mcp", "/mcp", "ui", "/ui/")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing calls in flight", "grace", cfg.Limits.ShutdownGrace.Duration)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Limits.ShutdownGrace.Duration)
	defer cancel()
	hs.Shutdown(sctx)
	shutdown(srv, cfg, log)
	return nil
}

// shutdown waits for the calls in flight (a streaming HTTP call outlives
// Server.Shutdown's view of idle connections).
func shutdown(srv *engine.Server, cfg *config.Config, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Limits.ShutdownGrace.Duration)
	defer cancel()
	if err := srv.Wait(ctx); err != nil {
		log.Warn("calls still running at shutdown", "err", err)
	}
}

// healthcheck probes a URL: exit 0 on 2xx, 1 otherwise. It needs no config,
// so a container health check works with nothing but the binary.
func healthcheck(args []string, stderr io.Writer) error {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "error: --healthcheck takes one URL\nhint: poligon --healthcheck http://127.0.0.1:8811/readyz")
		return exitError(2)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "unhealthy: %v\n", err)
		return exitError(1)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "unhealthy: %s\n", resp.Status)
		return exitError(1)
	}
	return nil
}

// openApp assembles the app a command runs on (its scripts may not take
// the names of the MCP door's tools). The command closes it.
func openApp(ctx context.Context, cfg *config.Config, log *slog.Logger) (*app.App, error) {
	return app.Open(ctx, cfg, app.Options{Log: log, Reserved: engine.BuiltinNames()})
}

// ownerOn is who the command-line verbs act as: the config's owner on a
// bench ("" = the default), and that bench's name.
func ownerOn(ctx context.Context, a *app.App, bench string) (*hostapi.Caller, string, error) {
	if bench == "" {
		bench = a.Config.DefaultBench
	}
	who, err := a.Caller(ctx, a.Local(), bench)
	return who, bench, err
}
