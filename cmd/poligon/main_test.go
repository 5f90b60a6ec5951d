package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/internal/testvm"
)

// binary builds poligon once per test run.
var binaryPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "poligon-bin")
	if err != nil {
		panic(err)
	}
	binaryPath = filepath.Join(dir, "poligon")
	if out, err := exec.Command("go", "build", "-o", binaryPath, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is a clean environment for the binary: its own data, state and
// config, owner "tester", and none of the developer's poligon or Proxmox
// settings.
func env(t *testing.T, data string) []string {
	t.Helper()
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POLIGON_") && !strings.HasPrefix(kv, "PVE_") && !strings.HasPrefix(kv, "XDG_") {
			base = append(base, kv)
		}
	}
	return append(base,
		"XDG_CONFIG_HOME="+t.TempDir(), "POLIGON_OWNER=tester", "POLIGON_DATA="+data,
		"POLIGON_STATE="+t.TempDir(), "POLIGON_MCP_EVIDENCE="+t.TempDir())
}

func poligon(t *testing.T, environ []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binaryPath, args...)
	cmd.Env = environ
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestCommandLine(t *testing.T) {
	e := env(t, testvm.ShortTempDir(t))
	if out, _, code := poligon(t, e, "version"); code != 0 || !strings.HasPrefix(out, "poligon ") {
		t.Errorf("version = %q (exit %d)", out, code)
	}
	if _, errOut, code := poligon(t, e, "frobnicate"); code != 2 || !strings.Contains(errOut, "error: unknown command") || !strings.Contains(errOut, "hint:") {
		t.Errorf("unknown command: exit %d, %q", code, errOut)
	}
	if _, _, code := poligon(t, e); code != 2 {
		t.Errorf("no command: exit %d", code)
	}

	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte("[[token]]\nowner = \"alice\"\ntoken = \"alice-token-0123456789\"\n"), 0o600)
	out, _, code := poligon(t, e, "config", "check", "--config", cfg)
	if code != 0 || !strings.Contains(out, "# ok: no problems") || strings.Contains(out, "alice-token") || !strings.Contains(out, `token = "***"`) {
		t.Errorf("config check = exit %d:\n%s", code, out)
	}
	os.WriteFile(cfg, []byte("log_level = \"loud\"\n"), 0o600)
	if _, errOut, code := poligon(t, e, "config", "check", "--config", cfg); code != 2 || !strings.Contains(errOut, `log_level "loud"`) {
		t.Errorf("a broken config: exit %d, %q", code, errOut)
	}
	if _, errOut, code := poligon(t, e, "serve", "--config", cfg); code != 2 || !strings.Contains(errOut, `log_level "loud"`) {
		t.Errorf("serve on a broken config: exit %d, %q", code, errOut)
	}

	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(503)
		}
	}))
	defer ok.Close()
	if _, _, code := poligon(t, e, "--healthcheck", ok.URL+"/readyz"); code != 0 {
		t.Errorf("healthcheck of a 200: exit %d", code)
	}
	if _, _, code := poligon(t, e, "--healthcheck", ok.URL+"/other"); code != 1 {
		t.Errorf("healthcheck of a 503: exit %d", code)
	}
}

// TestStdio talks MCP to `poligon serve --stdio` as a client would.
func TestStdio(t *testing.T) {
	scripts := t.TempDir()
	cmd := exec.Command(binaryPath, "serve", "--stdio", "--scripts", scripts)
	cmd.Env = env(t, testvm.ShortTempDir(t))
	var stderr testvm.SyncBuffer // written by the process's copier, read here
	cmd.Stderr = &stderr
	changed := make(chan struct{}, 10)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range tools.Tools {
		names[tool.Name] = true
	}
	for _, want := range []string{"vm_clone", "vm_exec", "ui_screenshot", "vm_login", "vm_install"} {
		if !names[want] {
			t.Errorf("%s not listed over stdio", want)
		}
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "vm_list_my_vms"})
	if err != nil || res.IsError || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "owner tester: 0 VMs") {
		t.Fatalf("vm_list_my_vms over stdio: %+v, %v", res, err)
	}
	// The scripts directory is watched: a new script is a new tool.
	os.WriteFile(filepath.Join(scripts, "hello.js"), []byte(`module.exports = { name: "hello", description: "says hello", run() { return "hello"; } };`), 0o644)
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatalf("no tools/list_changed after adding a script; the server's log:\n%s", stderr.String())
	}
	if tools, err := cs.ListTools(context.Background(), nil); err != nil || !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "vm_hello" }) {
		t.Fatalf("vm_hello not listed after list_changed (%v)", err)
	}
	if strings.Contains(stderr.String(), "level=ERROR") {
		t.Errorf("the server logged errors:\n%s", stderr.String())
	}
}

// TestRunCheckReplay runs a script from the terminal on a fresh clone of
// tiny, then replays its transcript with no machine.
func TestRunCheckReplay(t *testing.T) {
	e := env(t, testvm.DataDir(t))
	dir := t.TempDir()
	script := filepath.Join(dir, "hello.js")
	os.WriteFile(script, []byte(`module.exports = { name: "hello", description: "says hello",
  params: { word: { description: "the word", default: "hello" } },
  run(vm, p) { vm.log("saying " + p.word); return vm.expect("echo " + p.word + "-$(uname -s)").trim(); } };`), 0o644)

	if out, _, code := poligon(t, e, "check", dir); code != 0 || !strings.Contains(out, "ok     "+script+": hello (tool vm_hello)") {
		t.Fatalf("check = exit %d:\n%s", code, out)
	}
	out, errOut, code := poligon(t, e, "run", script, "--template", "tiny", "--param", "word=hi")
	if code != 0 || out != "hi-Linux\n" {
		t.Fatalf("run = exit %d, %q\n%s", code, out, errOut)
	}
	for _, want := range []string{"cloning tiny", "booted in", "saying hi", `expect {"command":"echo hi-$(uname -s)"} -> ok`, "destroying vmid", "ok: 2 host calls"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the step log misses %q:\n%s", want, errOut)
		}
	}
	m := regexp.MustCompile(`transcript (\S+\.jsonl)`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no transcript named:\n%s", errOut)
	}
	if out, errOut, code := poligon(t, e, "replay", m[1]); code != 0 || out != "replayed 2 calls clean\nhi-Linux\n" {
		t.Fatalf("replay = exit %d, %q %q", code, out, errOut)
	}
	// The run is a trace too: its transcript written as one, and its steps
	// as the trace kept them.
	page := filepath.Join(dir, "run.html")
	if _, errOut, code := poligon(t, e, "trace", "export", "--transcript", m[1], "--out", page); code != 0 {
		t.Fatalf("trace export --transcript = exit %d, %q", code, errOut)
	}
	if raw, _ := os.ReadFile(page); !strings.Contains(string(raw), "echo hi-$(uname -s)") || !strings.Contains(string(raw), ">expect<") {
		t.Fatalf("the transcript's page:\n%s", raw)
	}
	if out, errOut, code := poligon(t, e, "trace", "export", "--since", "1h", "--out", page); code != 0 || !strings.Contains(out, "steps") {
		t.Fatalf("trace export --since = exit %d, %q %q", code, out, errOut)
	}
	if raw, _ := os.ReadFile(page); !strings.Contains(string(raw), ">expect<") || !strings.Contains(string(raw), ">run<") {
		t.Fatalf("the run's trace lacks its expect step:\n%.2000s", raw)
	}
	if _, errOut, code := poligon(t, e, "trace", "export", "--out", page); code != 2 || !strings.Contains(errOut, "nothing selects") {
		t.Fatalf("trace export without a selection = exit %d, %q", code, errOut)
	}
	// The script changed so that it makes another call: the replay says where.
	os.WriteFile(script, []byte(`module.exports = { name: "hello", description: "says hello",
  params: { word: { description: "the word", default: "hello" } },
  run(vm, p) { vm.log("saying " + p.word); return vm.expect("echo bye").trim(); } };`), 0o644)
	if _, errOut, code := poligon(t, e, "replay", m[1]); code != 1 || !strings.Contains(errOut, "diverged at call 2") {
		t.Fatalf("replay of a changed script = exit %d, %q", code, errOut)
	}
	if _, errOut, code := poligon(t, e, "run", script, "--vm", "4242"); code != 1 || !strings.Contains(errOut, "vmid 4242 not found") {
		t.Fatalf("run on an unknown VM = exit %d, %q", code, errOut)
	}
}

// poligon image runs from the binary alone: from an empty directory, with
// the binary outside any source tree, it builds from the recipes it carries.
// Against the tests' shared data directory (built from the source tree) an
// unchanged recipe rebuilds nothing.
func TestImageFromTheBinaryAlone(t *testing.T) {
	data := filepath.Dir(testvm.TemplatesDir(t))
	empty := t.TempDir()
	e := append(env(t, data), "XDG_CACHE_HOME="+t.TempDir())
	cmd := exec.Command(binaryPath, "image", "tiny", data)
	cmd.Dir, cmd.Env = empty, e
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("poligon image tiny: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "building from") {
		t.Errorf("the embedded recipe rebuilt an unchanged template:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(data, "templates", "tiny.toml")); err != nil {
		t.Error(err)
	}
	cmd = exec.Command(binaryPath, "image", "windows")
	cmd.Dir, cmd.Env = empty, e
	out, _ = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "tiny|tiny-x") || !strings.Contains(string(out), "hint:") {
		t.Errorf("unknown template: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("poligon image wrote into the working directory: %d entries", len(entries))
	}
}
