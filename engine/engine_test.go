package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/audit"
	"github.com/poligon/poligon/internal/testvm"
)

// testConfig is a config for tests: the given data dir, an evidence dir,
// owner "tester" and a bearer token for HTTP tests.
func testConfig(t *testing.T, dataDir string) *config.Config {
	t.Helper()
	env := map[string]string{
		"POLIGON_OWNER":        "tester",
		"POLIGON_DATA":         dataDir,
		"POLIGON_MCP_EVIDENCE": t.TempDir(),
		"POLIGON_STATE":        t.TempDir(),
		"POLIGON_MCP_AUDIT":    filepath.Join(t.TempDir(), "audit.jsonl"),
	}
	cfg, problems := config.Load("", false, func(k string) string { return env[k] })
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	cfg.Tokens = []config.Token{{Owner: "tester", Token: "tester-token-0123456789"}, {Owner: "other", Token: "other-token-0123456789"}}
	return cfg
}

// newServer builds a server as the binary does (OCR, and the models the
// config names) and connects an in-memory MCP client.
func newServer(t *testing.T, cfg *config.Config) (*Server, *mcp.ClientSession) {
	t.Helper()
	s := startServer(t, cfg, nil)
	return s, connect(t, s)
}

// startServer builds a server as the binary does, its eyes included, logging
// to log (nil: nowhere), and closes it when the test ends.
func startServer(t testing.TB, cfg *config.Config, log *slog.Logger) *Server {
	t.Helper()
	return testServer(t, cfg, app.Options{Log: log})
}

// testServer assembles an app from cfg as the binary does (opts.OpenBench
// nil: the real backends) and answers its MCP door; the app is closed when
// the test ends.
func testServer(t testing.TB, cfg *config.Config, opts app.Options) *Server {
	t.Helper()
	opts.Reserved = BuiltinNames()
	a, err := app.Open(t.Context(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return New(a)
}

// backendOf answers a bench's backend as the config's owner reaches it
// ("" = the default bench), beneath the tools' rules.
func backendOf(t testing.TB, s *Server, bench string) backends.Backend {
	t.Helper()
	return localWho(t, s, bench).Backend()
}

// localWho is the config's owner on a bench ("" = the default).
func localWho(t testing.TB, s *Server, bench ...string) *hostapi.Caller {
	t.Helper()
	name := ""
	if len(bench) > 0 {
		name = bench[0]
	}
	who, err := s.Caller(context.Background(), s.app.Local(), name)
	if err != nil {
		t.Fatal(err)
	}
	return who
}

func connect(t *testing.T, s *Server) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and answers its text and whether it was an error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, *mcp.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	return resultText(res), res
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// mustOK fails unless the call succeeded.
func mustOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	out, res := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: %s", name, args, out)
	}
	return out
}

// mustRefuse fails unless the call was refused with an error: + hint: text
// containing want.
func mustRefuse(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) string {
	t.Helper()
	out, res := call(t, cs, name, args)
	if !res.IsError || !strings.HasPrefix(out, "error: ") || !strings.Contains(out, want) {
		t.Fatalf("%s %v: want an error containing %q, got (isError=%v) %q", name, args, want, res.IsError, out)
	}
	return out
}

// TestSchemasGolden checks every tool's definition (the built-in ones and
// the shipped scripts') against
// testdata/schemas/<tool>.json; UPDATE_GOLDEN=1 rewrites them. A tool
// without a golden file fails, so a new tool's schema is reviewed.
func TestSchemasGolden(t *testing.T) {
	s, _ := newServer(t, fullSurface(testConfig(t, testvm.ShortTempDir(t))))
	dir := filepath.Join("testdata", "schemas")
	update := os.Getenv("UPDATE_GOLDEN") != ""
	seen := map[string]bool{}
	for _, name := range s.ToolNames() {
		tool, _ := s.Tool(name)
		got, err := json.MarshalIndent(map[string]any{
			"name": tool.Name, "description": tool.Description,
			"annotations": tool.Annotations, "inputSchema": json.RawMessage(tool.Schema),
		}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		file := filepath.Join(dir, name+".json")
		seen[name+".json"] = true
		if update {
			os.MkdirAll(dir, 0o755)
			if err := os.WriteFile(file, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: no golden schema (%v): run UPDATE_GOLDEN=1 go test ./engine -run TestSchemasGolden and review it", name, err)
			continue
		}
		if string(want) != string(got) {
			t.Errorf("%s: schema differs from %s (UPDATE_GOLDEN=1 to accept):\n%s", name, file, got)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !seen[e.Name()] && !update {
			t.Errorf("%s: a golden schema for a tool that is gone", e.Name())
		}
	}
}

func TestArgumentRefusals(t *testing.T) {
	_, cs := newServer(t, testConfig(t, testvm.ShortTempDir(t)))
	mustRefuse(t, cs, "vm_start", map[string]any{}, "vmid is required")
	mustRefuse(t, cs, "vm_start", map[string]any{"vmid": "abc"}, "vmid must be an integer")
	mustRefuse(t, cs, "vm_start", map[string]any{"vmid": 100, "wait": 99}, "wait must be at most 50")
	mustRefuse(t, cs, "vm_start", map[string]any{"vmid": 100, "colour": "red"}, "unknown argument colour")
	mustRefuse(t, cs, "ui_click", map[string]any{"vmid": 100, "x": 1, "y": 1, "button": "side"}, "button must be one of left, middle, right")
	mustRefuse(t, cs, "vm_start", map[string]any{"vmid": 100, "bench": "nosuch"}, `unknown bench "nosuch"`)
	mustRefuse(t, cs, "vm_start", map[string]any{"vmid": 4242}, "vmid 4242 not found")
	mustRefuse(t, cs, "vm_destroy", map[string]any{"vmid": 4242, "confirm": false}, "confirm=true")
	mustRefuse(t, cs, "vm_task_wait", map[string]any{"upid": "UPID:local:00000001:00000001:00000001:qmstart:100:x@local:"}, "not found")
}

// limits.max_wait is the one wait cap: it is what every wait's schema
// allows (a default above it comes down to it), what the instructions say,
// and what a call may ask for.
func TestMaxWaitShapesTheTools(t *testing.T) {
	cfg := testConfig(t, testvm.ShortTempDir(t))
	cfg.Limits.MaxWait.Duration = 2 * time.Second
	_, cs := newServer(t, cfg)
	if in := cs.InitializeResult().Instructions; !strings.Contains(in, "Waits are capped at 2 s") {
		t.Errorf("instructions = %q", in)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{ // tool, property: maximum (and default)
		"ui_wait_for":  {"timeout": 2},
		"vm_wait_boot": {"timeout": 2},
		"vm_task_wait": {"timeout": 2},
		"vm_start":     {"wait": 2},
		"vm_run":       {"wait": 2},
		"ui_key":       {"settle_ms": 2000},
	}
	for _, tool := range res.Tools {
		for prop, max := range want[tool.Name] {
			raw, _ := json.Marshal(tool.InputSchema)
			var sc struct {
				Properties map[string]struct{ Maximum, Default float64 }
			}
			json.Unmarshal(raw, &sc)
			if p := sc.Properties[prop]; p.Maximum != max || p.Default > max {
				t.Errorf("%s.%s: maximum %g default %g, want maximum %g", tool.Name, prop, p.Maximum, p.Default, max)
			}
			delete(want[tool.Name], prop)
		}
	}
	for tool, props := range want {
		if len(props) > 0 {
			t.Errorf("%s: not listed with %v", tool, props)
		}
	}
	mustRefuse(t, cs, "ui_wait_for", map[string]any{"vmid": 100, "timeout": 3}, "timeout must be at most 2 (got 3)")
}

func TestAuditRedactsTypedText(t *testing.T) {
	cfg := testConfig(t, testvm.ShortTempDir(t))
	_, cs := newServer(t, cfg)
	call(t, cs, "ui_type", map[string]any{"vmid": 4242, "text": "hunter2-secret"})
	call(t, cs, "vm_file_write", map[string]any{"vmid": 4242, "path": "/x", "content_base64": "c2VjcmV0"})
	// A password a command carries, and the secrets of a plan's steps.
	call(t, cs, "vm_exec", map[string]any{"vmid": 4242, "command": "echo root:hunter2 | chpasswd"})
	call(t, cs, "stand_apply", map[string]any{"plan": json.RawMessage(`{"name": "s", "machines": [{"role": "m", "template": "nope",
		"steps": [{"type": "hunter2"}, {"recipe": {"name": "login", "password": "hunter2"}}]}]}`)})
	raw, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	log := string(raw)
	if strings.Contains(log, "hunter2") || strings.Contains(log, "c2VjcmV0") {
		t.Fatalf("the audit log holds typed text, file content or a password:\n%s", log)
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 4 || !strings.Contains(lines[2], "chpasswd") || !strings.Contains(lines[3], "recipe login password=") {
		t.Fatalf("want 4 audit lines, the command's and the plan's still readable, got %d:\n%s", len(lines), log)
	}
	var rec audit.Record
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Tool != "ui_type" || rec.Caller != "tester" || rec.Outcome != "error" || rec.VMID != 4242 || rec.Args["text"] != "<redacted 14 bytes>" {
		t.Fatalf("audit record = %+v", rec)
	}
}

func TestAuditErrorLeavesOutPayload(t *testing.T) {
	msg := `error: login failed after 3 host calls: expect failed: exitcode 1, stdout "password=hunter2", stderr "x"`
	got := auditError(msg)
	if strings.Contains(got, "hunter2") || !strings.HasPrefix(got, "error: login failed after 3 host calls: expect failed: exitcode 1") {
		t.Fatalf("auditError = %q", got)
	}
	if got := auditError(strings.Repeat("x", 1000)); len(got) != 303 {
		t.Fatalf("a long error is %d bytes", len(got))
	}
}
