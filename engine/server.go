// Package engine is poligon's MCP door: the tool registry, the built-in
// tools, their schemas and annotations, MCP sessions, metrics and the HTTP
// transport. The services behind it (benches, scripts, stands, eyes, the
// audit log) are the app's (internal/app), which every door shares. A
// built-in tool is a thin adapter: MCP arguments -> one hostapi call -> an
// MCP answer.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/audit"
	"github.com/poligon/poligon/internal/logs"
)

// Server is the MCP door of an app: its tools, the MCP server that serves
// them, the calls in flight and the HTTP endpoints.
type Server struct {
	app     *app.App
	cfg     *config.Config // app.Config
	log     *slog.Logger   // app.Log
	metrics *metrics
	mcp     *mcp.Server
	started time.Time

	mu    sync.RWMutex
	tools map[string]*Tool

	inflight sync.WaitGroup
	sessions sessionCalls // the calls in flight by MCP session

	streamPoll time.Duration // how long a 2025-11-25 call's SSE stream stays open (pollStream)
}

// New makes the MCP server of an app: the built-in tools of the offered
// toolsets and, as the app's catalog loads them, the tool scripts. It does
// not start listening. The app outlives it: the door that opened the app
// closes it.
func New(a *app.App) *Server {
	s := &Server{
		app:        a,
		cfg:        a.Config,
		log:        a.Log,
		tools:      map[string]*Tool{},
		started:    time.Now(),
		streamPoll: ssePoll,
	}
	s.metrics = newMetrics(s)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "poligon", Version: Version}, &mcp.ServerOptions{
		Instructions: instructions(s.limits()),
		// The SDK narrates every session at info: keep its warnings only.
		Logger: slog.New(quieter{s.log.Handler(), slog.LevelWarn}),
		// Tools with list_changed (scripts come and go); no MCP logging.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	s.addBuiltinTools() // the offered toolsets' (toolsets.go)
	a.Scripts.Subscribe(scriptTools{s})
	return s
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
	l := defaultLimits
	if s.cfg.Limits.MaxWait.Duration > 0 {
		l.maxWait = s.cfg.Limits.MaxWait.Duration
	}
	l.capturing = s.app.Env.Dataset != nil
	return l
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

// App answers the app this server is the door of.
func (s *Server) App() *app.App { return s.app }

// AddTool registers (or replaces) a tool; clients get list_changed.
func (s *Server) AddTool(t *Tool) {
	s.mu.Lock()
	s.tools[t.Name] = t
	s.mu.Unlock()
	def := t.def()
	if len(s.app.BenchNames()) == 1 {
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
		rec := callRecord{Record: audit.Record{Req: id, Tool: t.Name, Transport: "stdio"}}
		res, err := s.call(ctx, t, req, &rec, sent)
		rec.Ms = time.Since(start).Seconds() * 1000
		var shown logs.Cutting
		switch {
		case err != nil:
			shown = logs.Cut(err.Error(), err)
			rec.Outcome, rec.Error = "failed", shown.Text()
		case res.IsError:
			shown = logs.Cut(firstLine(res), rec.err)
			rec.Outcome, rec.Error = "error", shown.Text()
		default:
			rec.Outcome = "ok"
		}
		s.app.Audit.Write(rec.Record)
		s.traceCall(&rec, t, res)
		s.logCall(ctx, &rec, rpcID(ctx), shown, res, err)
		s.metrics.observe(t.Name, rec.Outcome, time.Since(start))
		return res, err
	}
}

// call resolves the caller and the bench, decodes the arguments and runs
// the tool. A refusal is a tool error; only a server failure is a Go error.
// rec.err keeps the error behind a tool error, for where its payload starts;
// sent is told of each progress notification.
func (s *Server) call(ctx context.Context, t *Tool, req *mcp.CallToolRequest, rec *callRecord, sent func()) (*mcp.CallToolResult, error) {
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
	ctx = s.observe(ctx, t, who, req, rec)
	res, err := t.Handle(ctx, &Call{Tool: t, Caller: who, Creds: c.creds, Bench: benchName, Args: args, Request: req, Server: s})
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
func (s *Server) Caller(ctx context.Context, who hostapi.Credentials, bench string) (*hostapi.Caller, error) {
	return s.app.Caller(ctx, who, bench)
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
