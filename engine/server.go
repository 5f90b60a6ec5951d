// Package engine is poligon's MCP surface: the tool registry, the built-in
// tools, callers and credentials, benches, the audit log, metrics and the
// HTTP endpoints. A built-in tool is a thin adapter: MCP arguments -> one
// hostapi call -> an MCP answer.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/vision"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/store"
)

// Server is one poligon instance: its benches, tools and the MCP server
// that serves them.
type Server struct {
	cfg     *config.Config
	log     *slog.Logger
	env     *hostapi.Env
	benches map[string]Bench
	audit   *auditLog
	metrics *metrics
	mcp     *mcp.Server
	scripts *catalog.Catalog // nil until LoadScripts
	started time.Time

	mu       sync.RWMutex
	tools    map[string]*Tool
	problems map[string]string // source -> problem, shown by /readyz

	inflight sync.WaitGroup
	sessions sessionCalls // the calls in flight by MCP session

	store   *store.Store // state shared with other processes (leases, stands); nil without state_dir
	builds  *standBuilds // the stands this server builds
	planner *stand.Planner

	streamPoll time.Duration // how long a 2025-11-25 call's SSE stream stays open (pollStream)
}

// lockDir is where VM locks meet other poligon processes using the same
// config (a server and a `poligon run`).
func lockDir(cfg *config.Config) string {
	if cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(cfg.StateDir, "locks")
}

// Options are what the CLI decides beyond the config.
type Options struct {
	Logger *slog.Logger
	// OpenBench makes each configured bench: the composition root
	// (internal/benches.Open), which alone knows the backends.
	OpenBench func(config.Bench, *slog.Logger) (Bench, error)
	// Eyes read the screen (internal/benches.OpenEyes); nil: ui_read,
	// ui_see and ui_click_label answer that they are not set up.
	Eyes *hostapi.Eyes
}

// Bench is a configured bench as the server uses it: what hostapi opens for
// a caller, plus readiness, metrics and shutdown.
type Bench interface {
	hostapi.Bench
	Problems() []string // for /readyz
	Consoles() int      // open console connections, for /metrics
	// Facts: what an operator should see of the bench (its accelerator,
	// its API), for the startup log and /readyz.
	Facts() map[string]string
	Close() // drop connections; VMs keep running
}

// New builds a server from a checked config: its benches and the built-in
// tools. It does not start listening.
func New(cfg *config.Config, opts Options) (*Server, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{
		cfg: cfg,
		log: log,
		env: &hostapi.Env{
			Evidence: cfg.EvidenceDir,
			Locks:    hostapi.NewLocks(lockDir(cfg)),
			MaxWait:  cfg.Limits.MaxWait.Duration,
			BusyWait: cfg.Limits.BusyWait.Duration,
			Eyes:     opts.Eyes,
		},
		benches:    map[string]Bench{},
		tools:      map[string]*Tool{},
		problems:   map[string]string{},
		started:    time.Now(),
		builds:     newStandBuilds(),
		streamPoll: ssePoll,
	}
	if opts.OpenBench == nil && len(cfg.Benches) > 0 {
		return nil, fmt.Errorf("engine: no OpenBench to make the configured benches with")
	}
	for _, bc := range cfg.Benches {
		b, err := opts.OpenBench(bc, log)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("bench %s: %w", bc.Name, err)
		}
		s.benches[bc.Name] = b
	}
	audit, err := openAudit(cfg.AuditLog)
	if err != nil {
		s.Close()
		return nil, err
	}
	if cfg.StateDir != "" {
		// Leases and stands live in the store other poligon processes share.
		st, err := store.Open(cfg.StateDir)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.store, s.env.Leases = st, st
	}
	s.audit = audit
	if s.planner, err = stand.NewPlanner(cfg.Planner, vision.Options{Log: log}); err != nil {
		s.Close()
		return nil, fmt.Errorf("planner model: %w", err)
	}
	s.metrics = newMetrics(s)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "poligon", Version: Version}, &mcp.ServerOptions{
		Instructions: instructions(s.limits()),
		// The SDK narrates every session at info: keep its warnings only.
		Logger: slog.New(quieter{log.Handler(), slog.LevelWarn}),
		// Tools with list_changed (scripts come and go); no MCP logging.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	s.addBuiltinTools() // the offered toolsets' (toolsets.go)
	return s, nil
}

// instructions is what the server tells every client about itself.
func instructions(l limits) string {
	return `poligon gives you disposable VMs to reproduce bugs on. Clone a template (vm_list_templates, vm_clone), ` +
		`start it (vm_start, vm_wait_boot), run commands (vm_exec, vm_run for long ones), drive its screen (ui_screenshot, ` +
		`ui_type, ui_key, ui_click) and destroy it when done (vm_destroy). Only VMs named <owner>-repro-* are yours. ` +
		fmt.Sprintf(`Waits are capped at %s: when an answer says "call again" or names a upid, call again.`, secondsText(l.maxWait))
}

// limits are the bounds the server's tools show (limits.max_wait).
func (s *Server) limits() limits {
	if s.cfg.Limits.MaxWait.Duration > 0 {
		return limits{maxWait: s.cfg.Limits.MaxWait.Duration}
	}
	return defaultLimits
}

// secondsText renders a duration as the schemas count it: "50 s", "2.5 s".
func secondsText(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// hasPhysical reports whether a bench of the config is a physical machine.
func hasPhysical(cfg *config.Config) bool {
	for _, b := range cfg.Benches {
		if b.Physical() {
			return true
		}
	}
	return false
}

// quieter drops a handler's records below a level.
type quieter struct {
	slog.Handler
	min slog.Level
}

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= q.min && q.Handler.Enabled(ctx, l)
}

func (q quieter) WithAttrs(a []slog.Attr) slog.Handler { return quieter{q.Handler.WithAttrs(a), q.min} }
func (q quieter) WithGroup(g string) slog.Handler      { return quieter{q.Handler.WithGroup(g), q.min} }

// MCP answers the MCP server (for stdio, in-memory tests and HTTP).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Config answers the effective config.
func (s *Server) Config() *config.Config { return s.cfg }

// Env answers the environment shared by every caller.
func (s *Server) Env() *hostapi.Env { return s.env }

// AddTool registers (or replaces) a tool; clients get list_changed.
func (s *Server) AddTool(t *Tool) {
	s.mu.Lock()
	s.tools[t.Name] = t
	s.mu.Unlock()
	def := t.def()
	if len(s.benches) == 1 {
		// One bench: the bench argument can only name it, so the list
		// every session pays for leaves it out (a call may still pass it).
		def.InputSchema = withoutBench(t.Schema)
	}
	s.mcp.AddTool(def, s.handler(t))
}

// RemoveTool unregisters a tool; clients get list_changed.
func (s *Server) RemoveTool(name string) {
	s.mu.Lock()
	delete(s.tools, name)
	s.mu.Unlock()
	s.mcp.RemoveTools(name)
}

// Tool answers a registered tool.
func (s *Server) Tool(name string) (*Tool, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tools[name]
	return t, ok
}

// ToolNames lists the registered tools, sorted.
func (s *Server) ToolNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.tools))
	for n := range s.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// SetProblem records (or with "" clears) a readiness problem from source.
func (s *Server) SetProblem(source, problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if problem == "" {
		delete(s.problems, source)
	} else {
		s.problems[source] = problem
	}
}

// Problems lists what keeps this instance from serving as configured.
func (s *Server) Problems() []string {
	var out []string
	if d := s.cfg.EvidenceDir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			out = append(out, "evidence directory is gone (an unmounted volume?)")
		}
	}
	out = append(out, s.eyesProblems()...)
	for _, name := range s.benchNames() {
		for _, p := range s.benches[name].Problems() {
			out = append(out, fmt.Sprintf("bench %s: %s", name, p))
		}
	}
	s.mu.RLock()
	for src, p := range s.problems {
		out = append(out, src+": "+p)
	}
	s.mu.RUnlock()
	sort.Strings(out)
	return out
}

// BenchFacts answers what an operator should see of each bench, by name.
func (s *Server) BenchFacts() map[string]map[string]string {
	out := make(map[string]map[string]string, len(s.benches))
	for name, b := range s.benches {
		out[name] = b.Facts()
	}
	return out
}

func (s *Server) benchNames() []string {
	names := make([]string, 0, len(s.benches))
	for n := range s.benches {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// handler wraps a tool for the MCP server: who calls, on which bench,
// with which arguments; then the tool; then the audit record, the tool
// line and metrics. The call's req rides in ctx to every line it causes.
func (s *Server) handler(t *Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		if req.Session != nil {
			var done func()
			ctx, done = s.sessions.track(ctx, req.Session.ID())
			defer done()
		}
		id := logs.Req(ctx)
		if id == "" {
			id = reqIDs.Next()
			ctx = logs.WithReq(ctx, id)
		}
		sent, stopPolling := s.pollStream(req)
		defer stopPolling()
		start := time.Now()
		rec := auditRecord{Req: id, Tool: t.Name, Transport: "stdio"}
		res, err := s.call(ctx, t, req, &rec, sent)
		rec.Ms = time.Since(start).Seconds() * 1000
		var shown logs.Cutting
		switch {
		case err != nil:
			shown = logs.Cut(err.Error(), err)
			rec.Outcome, rec.Error = "failed", auditText(shown)
		case res.IsError:
			shown = logs.Cut(firstLine(res), rec.err)
			rec.Outcome, rec.Error = "error", auditText(shown)
		default:
			rec.Outcome = "ok"
		}
		s.audit.write(rec)
		s.logCall(ctx, &rec, rpcID(ctx), shown, res, err)
		s.metrics.observe(t.Name, rec.Outcome, time.Since(start))
		return res, err
	}
}

// call resolves the caller and the bench, decodes the arguments and runs
// the tool. A refusal is a tool error; only a server failure is a Go error.
// rec.err keeps the error behind a tool error, for where its payload starts;
// sent is told of each progress notification.
func (s *Server) call(ctx context.Context, t *Tool, req *mcp.CallToolRequest, rec *auditRecord, sent func()) (*mcp.CallToolResult, error) {
	refuse := func(err error) (*mcp.CallToolResult, error) {
		rec.err = err
		return errorResult(err), nil
	}
	c, err := s.callerOf(req)
	if req.Extra != nil && req.Extra.Header != nil {
		rec.Transport = "http"
	}
	rec.Caller = c.id
	if err != nil {
		return refuse(err)
	}
	raw, benchName, err := splitBench(req.Params.Arguments)
	if err != nil {
		return refuse(err)
	}
	if benchName == "" {
		benchName = s.cfg.DefaultBench
	}
	rec.Bench = benchName // the configured name, refused calls included
	args, err := t.Decode(raw)
	rec.Args = redactArgs(t, raw)
	if err != nil {
		return refuse(err)
	}
	if t.VMID != nil {
		rec.VMID = t.VMID(args)
	}
	var who *hostapi.Caller
	if t.NoBench {
		rec.Owner = c.creds.Owner
	} else {
		who, err = s.Caller(ctx, c.creds, benchName)
		if err != nil {
			return refuse(err)
		}
		rec.Owner = who.Owner()
		who.WithProgress(progressTo(ctx, req, sent))
	}
	res, err := t.Handle(ctx, &Call{Tool: t, Caller: who, Bench: benchName, Args: args, Request: req, Server: s})
	var dry *hostapi.DryRun
	if errors.As(err, &dry) {
		// A dry-run bench logs what it skipped; the answer says so.
		s.log.InfoContext(ctx, "dry run", "tool", t.Name, "bench", benchName, "skipped", dry.What)
		return text("dry run: %s was logged and not done", dry.What), nil
	}
	if err != nil {
		// A backend's failure is still the model's to read: as a Go error it
		// would only see "internal error".
		return refuse(err)
	}
	return res, nil
}

// Caller binds credentials to a bench ("" = the default bench).
func (s *Server) Caller(ctx context.Context, who hostapi.Credentials, benchName string) (*hostapi.Caller, error) {
	if benchName == "" {
		benchName = s.cfg.DefaultBench
	}
	b, ok := s.benches[benchName]
	if !ok {
		return nil, hostapi.Failf("benches: "+strings.Join(s.benchNames(), ", "), "unknown bench %q", benchName)
	}
	return hostapi.Open(ctx, s.env, b, who)
}

// progressTo sends MCP progress notifications when the client gave a
// progress token, telling sent of each.
func progressTo(ctx context.Context, req *mcp.CallToolRequest, sent func()) hostapi.Progress {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	return func(msg string, elapsed, total time.Duration) {
		if req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token,
			Message:       msg,
			Progress:      elapsed.Seconds(),
			Total:         total.Seconds(),
		}) == nil {
			sent()
		}
	}
}

func firstLine(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			line, _, _ := strings.Cut(t.Text, "\n")
			return line
		}
	}
	return ""
}

// Wait blocks until the calls in flight have finished or ctx ends.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close releases the benches' connections. Running VMs keep running; a
// stand building is interrupted (stand_apply resume=true continues it).
func (s *Server) Close() error {
	s.builds.closeAll(30 * time.Second)
	for _, b := range s.benches {
		b.Close()
	}
	if s.audit != nil {
		s.audit.close()
	}
	if s.scripts != nil {
		s.scripts.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
	return nil
}
