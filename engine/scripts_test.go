package engine

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/engine/catalog"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/testvm"
	"github.com/poligon/poligon/runtime/transcript"
)

// scriptServer starts a server watching a scripts directory and connects a
// client that counts tools/list_changed notifications.
func scriptServer(t *testing.T, dataDir string) (*Server, *mcp.ClientSession, string, chan struct{}) {
	t.Helper()
	cfg := testConfig(t, dataDir)
	cfg.ScriptsDir = t.TempDir()
	s := testServer(t, cfg, app.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.app.Scripts.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 100)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "reload-test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return s, cs, cfg.ScriptsDir, changed
}

// drain forgets the notifications received so far, before an edit.
func drain(changed chan struct{}) {
	for {
		select {
		case <-changed:
		default:
			return
		}
	}
}

// waitListed waits for tools/list_changed notifications until the client's
// tool list satisfies cond, checking it at each one: a save can reach the
// watcher as two events astride the debounce, so one edit may change the
// list twice. Drain before the edit.
func waitListed(t *testing.T, changed chan struct{}, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(backendtest.HangGuard)
	for {
		select {
		case <-changed:
			if cond() {
				return
			}
		case <-timeout:
			t.Fatalf("no tools/list_changed that brought %s within %s", what, backendtest.HangGuard)
		}
	}
}

// listed answers the client's view of a tool, nil when it is not listed.
func listed(t *testing.T, cs *mcp.ClientSession, name string) *mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == name {
			return tool
		}
	}
	return nil
}

func scriptSrc(name, desc, body string) string {
	return `module.exports = { name: "` + name + `", description: "` + desc + `", params: { word: { description: "a word", default: "hi" } },
  run(vm, p) { ` + body + ` } };`
}

// eventually polls cond, for what sends no notification (a problem
// reported); the deadline only guards against a hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(backendtest.HangGuard); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", backendtest.HangGuard, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func problemAbout(s *Server, file, want string) bool {
	for _, p := range s.app.Problems() {
		if strings.Contains(p, file) && strings.Contains(p, want) {
			return true
		}
	}
	return false
}

func TestHotReload(t *testing.T) {
	s, cs, dir, changed := scriptServer(t, testvm.ShortTempDir(t))
	file := filepath.Join(dir, "hello.js")
	write := func(path, src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	desc := func() string {
		if tool := listed(t, cs, "vm_hello"); tool != nil {
			return tool.Description
		}
		return "<not listed>"
	}

	drain(changed)
	write(file, scriptSrc("hello", "v1", `return p.word;`))
	waitListed(t, changed, "v1 after creating hello.js", func() bool { return desc() == "v1" })
	tool := listed(t, cs, "vm_hello")
	if tool == nil || tool.Description != "v1" {
		t.Fatalf("after create: %v", desc())
	}
	schema, _ := json.Marshal(tool.InputSchema)
	if !strings.Contains(string(schema), `"word":{"default":"hi","description":"a word","type":"string"}`) || !strings.Contains(string(schema), `"required":["vmid"]`) {
		t.Fatalf("vm_hello schema = %s", schema)
	}

	drain(changed)
	write(file, scriptSrc("hello", "v2", `return p.word;`)) // an in-place write
	waitListed(t, changed, "v2 after an in-place write", func() bool { return desc() == "v2" })

	drain(changed)
	tmp := filepath.Join(dir, ".hello.js.swp") // an atomic save: write beside, rename over
	write(tmp, scriptSrc("hello", "v3", `return p.word;`))
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	waitListed(t, changed, "v3 after an atomic rename", func() bool { return desc() == "v3" })

	drain(changed)
	if err := os.Rename(file, file+"~"); err != nil { // a vim-style save: backup away, write anew
		t.Fatal(err)
	}
	write(file, scriptSrc("hello", "v4", `return p.word;`))
	waitListed(t, changed, "v4 after a vim-style save", func() bool { return desc() == "v4" })

	write(file, `module.exports = { name: "hello", description: "broken", run(vm) { return ( } };`)
	eventually(t, "the broken file reported in /readyz", func() bool { return problemAbout(s, "hello.js", "hello.js") })
	if desc() != "v4" {
		t.Fatalf("a broken file replaced the live version: %s", desc())
	}
	drain(changed)
	write(file, scriptSrc("hello", "v5", `return p.word;`))
	waitListed(t, changed, "v5 after the fix", func() bool { return desc() == "v5" })
	if problemAbout(s, "hello.js", "hello.js") {
		t.Fatalf("the fixed file is still reported: %v", s.app.Problems())
	}

	drain(changed)
	os.Remove(file)
	waitListed(t, changed, "vm_hello gone after its file was deleted", func() bool { return desc() == "<not listed>" })
}

// A manifest's title is its tool's title (MCP clients show it); without
// one the title is the name in words.
func TestScriptTitle(t *testing.T) {
	_, cs, dir, _ := scriptServer(t, testvm.ShortTempDir(t))
	titled := strings.Replace(scriptSrc("crash", "reproduces the crash", `return 1;`), "params:", `title: "Reproduce the crash", params:`, 1)
	for name, src := range map[string]string{"crash.js": titled, "plain_one.js": scriptSrc("plain_one", "x", `return 1;`)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "both tools listed", func() bool { return listed(t, cs, "vm_crash") != nil && listed(t, cs, "vm_plain_one") != nil })
	for name, want := range map[string]string{"vm_crash": "Reproduce the crash", "vm_plain_one": "Plain one (script)"} {
		tool := listed(t, cs, name)
		if tool.Title != want || tool.Annotations == nil || tool.Annotations.Title != want {
			t.Errorf("%s: title %q, annotations %+v; want %q", name, tool.Title, tool.Annotations, want)
		}
	}
}

func TestScriptValidation(t *testing.T) {
	s, cs, dir, _ := scriptServer(t, testvm.ShortTempDir(t))
	files := map[string]string{
		"exec.js":     scriptSrc("exec", "collides", `return 1;`),
		"norecipe.js": scriptSrc("norecipe", "x", `return vm.recipe("nosuch", {});`),
		"badparam.js": scriptSrc("badparam", "x", `return vm.recipe("enable_service", { svc: "x" });`),
		"fs.js":       `const fs = require("fs"); module.exports = { name: "fsy", description: "x", run() {} };`,
		"twin_a.js":   scriptSrc("twin", "first", `return 1;`),
		"twin_b.js":   scriptSrc("twin", "second", `return 2;`),
		"deep.js":     scriptSrc("deep", "x", `return vm.recipe("r1", {});`),
		"r1.js":       strings.Replace(scriptSrc("r1", "x", `return vm.recipe("r2", {});`), "params:", "tool: false, params:", 1),
		"r2.js":       strings.Replace(scriptSrc("r2", "x", `return vm.recipe("r3", {});`), "params:", "tool: false, params:", 1),
		"r3.js":       strings.Replace(scriptSrc("r3", "x", `return vm.recipe("r4", {});`), "params:", "tool: false, params:", 1),
		"r4.js":       strings.Replace(scriptSrc("r4", "x", `return 1;`), "params:", "tool: false, params:", 1),
		"esmodule.js": `export default { name: "esm" };`,
		"badname.js":  scriptSrc("Bad-Name", "x", `return 1;`),
		"good.js":     scriptSrc("good", "fine", `return vm.recipe("enable_service", { service: "x" });`),
		// Loaded in name order: the first requires the second, new in the same scan.
		"usesdep.js":   `const dep = require("depz"); module.exports = { name: "usesdep", description: "borrows " + dep.name, run() { return 1; } };`,
		"zz_dep.js":    strings.Replace(scriptSrc("depz", "x", `return 1;`), "params:", "tool: false, params:", 1),
		"notascript.c": `int main() {}`,
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{
		"exec.js":     "collides with a built-in tool",
		"norecipe.js": `unknown recipe "nosuch"`,
		"badparam.js": `unknown param "svc"`,
		"fs.js":       "fs",
		"twin_b.js":   "name twin is taken by twin_a.js",
		"deep.js":     "nest 4 deep (deep -> r1 -> r2 -> r3 -> r4)",
		"esmodule.js": "module.exports",
		"badname.js":  "Bad-Name",
	}
	for file, msg := range want {
		eventually(t, file+" reported: "+msg+" in "+strings.Join(s.app.Problems(), " / "), func() bool { return problemAbout(s, file, msg) })
	}
	eventually(t, "vm_usesdep listed", func() bool { return listed(t, cs, "vm_usesdep") != nil })
	if listed(t, cs, "vm_good") == nil || listed(t, cs, "vm_twin") == nil || listed(t, cs, "vm_deep") != nil || listed(t, cs, "vm_r1") != nil {
		t.Fatalf("the valid scripts should be tools, the rest not: %v", s.ToolNames())
	}
	if tool, _ := s.Tool("vm_exec"); tool.Description == "collides" {
		t.Fatal("a script replaced the built-in vm_exec")
	}

	reports, err := catalog.Check(context.Background(), dir, t.TempDir(), BuiltinNames(), s.log)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, r := range reports {
		if r.Problem != nil {
			bad = append(bad, filepath.Base(r.File))
		}
	}
	sort.Strings(bad)
	if strings.Join(bad, " ") != "badname.js badparam.js deep.js esmodule.js exec.js fs.js norecipe.js twin_b.js" {
		t.Fatalf("poligon check found problems in %v", bad)
	}
}

// verbsScript exercises every verb of the script API on a tiny VM.
const verbsScript = `
const text = require("poligon/text");
module.exports = {
  name: "verbs",
  description: "every verb once",
  params: { word: { description: "echoed", default: "hello" }, password: { description: "a secret", default: "s3cret-pw" } },
  run(vm, p) {
    const out = [];
    out.push(vm.exec("echo " + p.word).stdout.trim());
    out.push(vm.expect("echo ok; echo " + p.password + " >/dev/null", { contains: "ok" }).trim());
    vm.log("the guest says " + vm.exec("echo " + p.password).stdout); // an answer and a log line holding the secret
    out.push(String(vm.check("false")));
    try { vm.expect("exit 3"); out.push("expect did not throw"); } catch (e) { out.push(e.message.includes("exitcode 3") && e.hint ? "expect throws" : e.message); }
    vm.file.write("/tmp/v.txt", "fïle");
    out.push(vm.file.read("/tmp/v.txt"));
    const r = vm.run("echo detached", { wait: 20 });
    out.push(r.state + ": " + r.tail.trim() + (r.state === "done" ? "" : " exit " + r.exit));
    out.push(vm.waitBoot({ timeout: 5 }) !== null ? "booted" : "not booted");
    const shot = vm.screen.shot();
    out.push(shot.width > 0 && shot.height > 0 ? "shot" : "no shot");
    vm.screen.waitStill({ seconds: 0.5, timeout: 20 });
    vm.keyboard.type("echo typed-" + p.word + " > /tmp/ts");
    vm.keyboard.press("ret");
    vm.screen.waitChange({ timeout: 1 });
    out.push(vm.check("for i in $(seq 50); do [ -s /tmp/ts ] && cat /tmp/ts && exit 0; sleep 0.2; done; exit 1").trim());
    vm.mouse.move(5, 5);
    vm.mouse.click(5, 5);
    vm.mouse.doubleClick(6, 6);
    vm.mouse.drag(5, 5, 50, 50);
    vm.power.snapshot("vsnap");
    vm.file.write("/tmp/v.txt", "changed");
    vm.power.rollback("vsnap");
    vm.waitBoot({ timeout: 60 });
    out.push(vm.file.read("/tmp/v.txt"));
    out.push(vm.evidence.save("verbs/shot.png"));
    vm.log("logged from the script");
    out.push(vm.recipe("shout", { text: "via recipe" }));
    vm.sleep(0.1);
    out.push(text.lines("a\nb\n").length);
    return out.join("\n");
  },
};`

const shoutRecipe = `module.exports = { name: "shout", description: "upper-cases text in the guest", tool: false,
  params: { text: { description: "what to shout" } },
  run(vm, p) { return vm.expect("echo '" + p.text + "' | tr a-z A-Z").trim(); } };`

// TestScriptsOnTiny runs a JS script using every verb and a Wasm script as
// tools on a tiny VM, then replays the JS run's transcript clean and a
// tampered one to its divergence.
func TestScriptsOnTiny(t *testing.T) {
	s, cs, dir, _ := scriptServer(t, testvm.DataDir(t))
	os.WriteFile(filepath.Join(dir, "shout.js"), []byte(shoutRecipe), 0o644)
	os.WriteFile(filepath.Join(dir, "verbs.js"), []byte(verbsScript), 0o644)
	buildWasm(t, "../runtime/wasm/testdata/uname", filepath.Join(dir, "uname.wasm"))
	// Compiling the Wasm script takes seconds (tens under -race).
	eventually(t, "vm_verbs and vm_uname listed", func() bool { return listed(t, cs, "vm_verbs") != nil && listed(t, cs, "vm_uname") != nil })

	vmid := atoi(t, cloneTiny(t, cs, "scripts"))
	t.Cleanup(func() { call(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	bootVM(t, cs, vmid)

	out, res := call(t, cs, "vm_verbs", map[string]any{"vmid": vmid, "word": "poligon"})
	if res.IsError {
		t.Fatalf("vm_verbs: %s", out)
	}
	want := []string{"poligon", "ok", "null", "expect throws", "fïle", "done: detached", "booted", "shot",
		"typed-poligon", "fïle", "verbs/shot.png", "VIA RECIPE", "2"}
	lines := strings.Split(out, "\n")
	if len(lines) < len(want)+1 || !strings.HasPrefix(lines[0], "ok verbs vmid ") {
		t.Fatalf("vm_verbs answered:\n%s", out)
	}
	for i, w := range want {
		if lines[i+1] != w {
			t.Fatalf("vm_verbs line %d = %q, want %q; the answer:\n%s", i+1, lines[i+1], w, out)
		}
	}
	if _, err := os.Stat(filepath.Join(s.cfg.EvidenceDir, "verbs", "shot.png")); err != nil {
		t.Fatalf("evidence.save wrote nothing: %v", err)
	}
	if img := res.Content[len(res.Content)-1]; img.(*mcp.ImageContent) == nil {
		t.Fatal("the run's last screenshot is missing from the answer")
	}

	if out := mustOK(t, cs, "vm_uname", map[string]any{"vmid": vmid, "flags": "-s"}); !strings.Contains(out, "Linux") {
		t.Fatalf("vm_uname (wasm) = %q", out)
	}
	mustRefuse(t, cs, "vm_verbs", map[string]any{"vmid": 4242}, "not found")
	// The shipped scripts run their steps on a real guest: tiny has no
	// apt-get and no desktop user, and they say so.
	mustRefuse(t, cs, "vm_install", map[string]any{"vmid": vmid, "packages": "hello"}, "apt-get failed (exit 127)")
	mustRefuse(t, cs, "vm_login", map[string]any{"vmid": vmid}, "expect failed: exitcode 1")

	// The transcript: no secret in it, a clean replay, a tampered one fails
	// at the tampered call.
	path := newestTranscript(t, s, "verbs")
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), "s3cret-pw") {
		t.Fatalf("the transcript holds the password param:\n%s", raw)
	}
	rep, err := catalog.Replay(context.Background(), path, "", s.log)
	if err != nil || !rep.Finished || rep.Calls < 25 {
		t.Fatalf("replay: %+v, %v", rep, err)
	}
	if !strings.Contains(string(rep.Value), "VIA RECIPE") {
		t.Fatalf("replayed value = %s", rep.Value)
	}
	// Tamper with the arguments of call 2 (the expect).
	lines = strings.Split(strings.TrimSpace(string(raw)), "\n")
	for i, line := range lines {
		var e map[string]any
		json.Unmarshal([]byte(line), &e)
		if e["Seq"] == 2.0 {
			e["Args"] = map[string]any{"command": "echo tampered"}
			b, _ := json.Marshal(e)
			lines[i] = string(b)
		}
	}
	tampered := strings.Join(lines, "\n") + "\n"
	tpath := filepath.Join(t.TempDir(), "tampered.jsonl")
	os.WriteFile(tpath, []byte(tampered), 0o644)
	_, err = catalog.Replay(context.Background(), tpath, filepath.Join(dir, "verbs.js"), s.log)
	if err == nil || !strings.Contains(err.Error(), "diverged at call 2") {
		t.Fatalf("a tampered transcript: err = %v", err)
	}
}

func newestTranscript(t *testing.T, s *Server, script string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(s.cfg.StateDir, "transcripts", "*-"+script+"-*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no transcript written")
	}
	sort.Strings(files)
	f := files[len(files)-1]
	if _, _, err := readTranscript(f); err != nil {
		t.Fatal(err)
	}
	return f
}

func readTranscript(path string) (transcript.Header, []transcript.Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return transcript.Header{}, nil, err
	}
	defer f.Close()
	return transcript.Read(f)
}

// buildWasm builds a Go package as a wasip1 reactor (a Wasm script).
func buildWasm(t *testing.T, pkg, out string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain: cannot build the Wasm script")
	}
	cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
}
