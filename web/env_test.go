package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/engine"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/testvm"
)

// The tokens of the test config's two owners: alice (also the owner at
// the trusted door, the in-memory MCP client) and bob.
const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
)

// testConfig is a config whose owner is alice, with bearer tokens for
// alice and bob, a state store (the trace), an audit log and evidence.
func testConfig(t testing.TB, dataDir string) *config.Config {
	t.Helper()
	env := map[string]string{
		"POLIGON_OWNER":        "alice",
		"POLIGON_DATA":         dataDir,
		"POLIGON_MCP_EVIDENCE": t.TempDir(),
		"POLIGON_STATE":        t.TempDir(),
		"POLIGON_MCP_AUDIT":    filepath.Join(t.TempDir(), "audit.jsonl"),
	}
	cfg, problems := config.Load("", false, func(k string) string { return env[k] })
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	cfg.Tokens = []config.Token{{Owner: "alice", Token: aliceToken}, {Owner: "bob", Token: bobToken}}
	return cfg
}

// liveEnv is an app served as poligon serve serves it (/ui/ beside /mcp),
// with an in-memory MCP client as alice.
type liveEnv struct {
	app  *app.App
	web  *Server
	mcp  *mcp.ClientSession
	url  string
	logs *testvm.SyncBuffer
}

func newEnv(t testing.TB, cfg *config.Config, opts app.Options, wo Options) *liveEnv {
	t.Helper()
	e := &liveEnv{logs: &testvm.SyncBuffer{}}
	log, err := logs.New(e.logs, "logfmt", "debug")
	if err != nil {
		t.Fatal(err)
	}
	opts.Log, opts.Reserved = log, engine.BuiltinNames()
	if e.app, err = app.Open(context.Background(), cfg, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.app.Close)
	srv := engine.New(e.app)
	e.web = New(e.app, wo)
	mux := http.NewServeMux()
	mux.Handle("/ui/", e.web.Handler())
	mux.Handle("/", srv.Handler())
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	e.url = ts.URL
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	if e.mcp, err = mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.mcp.Close() })
	return e
}

// call calls a tool as alice and fails the test unless it succeeds.
func (e *liveEnv) call(t testing.TB, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := e.mcp.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s %v: %s", name, args, textOf(res))
	}
	return res
}

func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

var vmidLine = regexp.MustCompile(`^vmid (\d+) `)

// bootTiny clones the tiny template as alice, starts it and waits for its
// guest agent; the VM is destroyed when the test ends.
func (e *liveEnv) bootTiny(t testing.TB, name string) int {
	t.Helper()
	out := textOf(e.call(t, "vm_clone", map[string]any{"template_vmid": 9000, "name": name, "full": false}))
	m := vmidLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("vm_clone answered %q", out)
	}
	vmid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.mcp.CallTool(ctx, &mcp.CallToolParams{Name: "vm_destroy", Arguments: map[string]any{"vmid": vmid, "confirm": true, "wait": 50}})
	})
	e.call(t, "vm_start", map[string]any{"vmid": vmid})
	for i := 0; ; i++ {
		if out := textOf(e.call(t, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 50})); strings.HasPrefix(out, "booted") {
			return vmid
		}
		if i == 3 {
			t.Fatalf("vmid %d not booted after 4 calls of vm_wait_boot", vmid)
		}
	}
}

// exec runs a command in alice's VM through the guest agent and answers
// its output.
func (e *liveEnv) exec(t testing.TB, vmid int, command string) string {
	t.Helper()
	return textOf(e.call(t, "vm_exec", map[string]any{"vmid": vmid, "command": command}))
}

// chromium is Debian's browser: the tests drive it, they download none.
const chromium = "/usr/bin/chromium"

// newBrowser starts a headless chromium for the test (closed at its end)
// and answers its context; tab makes tabs in it.
func newBrowser(t testing.TB) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s is missing (apt-get install chromium): skipping a test that drives a real browser", chromium)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()))
	browser, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(browser); err != nil { // starts it
		cancel()
		cancelAlloc()
		t.Fatalf("starting %s: %v", chromium, err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return browser
}

// tab opens a tab in a browser context of its own (its own cookies: one
// browser, several people).
func tab(t testing.TB, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return ctx
}

// do runs actions in a tab, bounded in time.
func do(t testing.TB, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// eval evaluates an expression in a tab (awaiting a promise) into a T.
func eval[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("browser: %s: %v", firstLine(expr), err)
	}
	return v
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// waitFor polls a boolean expression in a tab until it holds.
func waitFor(t testing.TB, ctx context.Context, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if eval[bool](t, ctx, "!!("+expr+")") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("browser: %s did not hold within %s", expr, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// login logs a tab in through the login form with a bearer token.
func login(t testing.TB, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("login")))
	waitFor(t, ctx, `document.body && document.body.dataset.page === "vms"`, 20*time.Second)
}

// fetchResult is what a fetch from a tab answered.
type fetchResult struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// fetch makes a request from a tab's page (its cookie, its origin).
func fetch(t testing.TB, ctx context.Context, method, path string, headers map[string]string, body string) fetchResult {
	t.Helper()
	if headers == nil {
		headers = map[string]string{}
	}
	h, _ := json.Marshal(headers)
	opts := fmt.Sprintf(`{method: %q, headers: %s, credentials: "same-origin"%s}`, method, h, map[bool]string{true: ", body: " + strconv.Quote(body), false: ""}[body != ""])
	return eval[fetchResult](t, ctx, fmt.Sprintf(`fetch(%q, %s).then(async r => ({status: r.status, body: await r.text()}))`, path, opts))
}

// sessionCookie answers the tab's session cookie (HttpOnly: the page
// cannot read it; the browser's protocol can).
func sessionCookie(t testing.TB, ctx context.Context) string {
	t.Helper()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Cookies {
		if c.Name == cookieName {
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("the session cookie is HttpOnly=%v SameSite=%s, want HttpOnly and Strict", c.HTTPOnly, c.SameSite)
			}
			return c.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}
