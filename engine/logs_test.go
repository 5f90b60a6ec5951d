package engine

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends/pve/pvetest"
	"github.com/poligon/poligon/backends/vision/visiontest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/testvm"
)

// The log an operator follows: one call's req on its tool line and on
// every line the call causes, errors cut at their payload, no secret at
// any level.

// logBuf is a log sink the server writes from many goroutines.
type logBuf = testvm.SyncBuffer

// loggedServer makes a server as the binary does (its eyes, the config's
// log format) whose debug log goes to the answered buffer.
func loggedServer(t *testing.T, cfg *config.Config) (*Server, *logBuf) {
	t.Helper()
	buf := &logBuf{}
	log, err := logs.New(buf, cfg.LogFormat, "debug")
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, cfg, log), buf
}

// logLines parses a logfmt log, failing on a line that is not logfmt.
func logLines(t *testing.T, text string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		kv, err := logs.ParseLogfmt(line)
		if err != nil {
			t.Fatalf("not logfmt: %v\n%s", err, line)
		}
		out = append(out, kv)
	}
	return out
}

// toolLine answers the one tool line of a call of tool (the last one).
func toolLine(t *testing.T, lines []map[string]string, tool string) map[string]string {
	t.Helper()
	var found map[string]string
	for _, l := range lines {
		if l["msg"] == "tool" && l["tool"] == tool {
			found = l
		}
	}
	if found == nil {
		t.Fatalf("no tool line for %s", tool)
	}
	return found
}

// withReq answers the lines whose msg is msg and whose req is req.
func withReq(lines []map[string]string, msg, req string) []map[string]string {
	var out []map[string]string
	for _, l := range lines {
		if l["msg"] == msg && l["req"] == req {
			out = append(out, l)
		}
	}
	return out
}

// One stand_plan over Streamable HTTP on a Proxmox bench (pvetest) with
// the planner model (visiontest): its tool line carries req and the
// client's JSON-RPC id, and the same req is on its PVE request lines and
// its model line. At debug no secret reaches the log: the PVE tokens, the
// bearer token, a physical bench's key and password, the model key.
func TestToolLineJoinsItsTrail(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{})
	model := visiontest.New()
	t.Cleanup(model.Close)
	cfg := lab.config(t, "")
	const (
		planKey  = "plan-key-0123456789abcdef"
		benchKey = "bench-key-0123456789abcdef"
		benchPW  = "pw-kvm9-0123456789abcdef"
	)
	cfg.Planner = config.Planner{API: model.ChatURL(), Model: "planner-test", Key: planKey}
	cfg.Benches = append(cfg.Benches, config.Bench{Name: "kvm9", Type: "pikvm", Endpoint: config.Endpoint{API: "https://127.0.0.1:1"}, PhysicalBench: config.PhysicalBench{User: "admin", Password: benchPW, Key: benchKey, Allow: []string{"hid"}}})
	s, buf := loggedServer(t, cfg)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	cs, err := httpClient(t, ts.URL, map[string]string{"X-PVE-Token": lab.alice})
	if err != nil {
		t.Fatal(err)
	}
	plan := `{"name": "web", "machines": [{"role": "server", "template": "debian-12-x86-64", "steps": [{"exec": "true"}]}]}`
	model.Reply(visiontest.Reply{Content: "```json\n" + plan + "\n```"})
	if out, res := call(t, cs, "stand_plan", map[string]any{"goal": "a web server"}); res.IsError {
		t.Fatalf("stand_plan: %s", out)
	}
	// The other credentials, over HTTP too.
	bearer, err := httpClient(t, ts.URL, map[string]string{"Authorization": "Bearer tester-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	call(t, bearer, "vm_list_templates", map[string]any{"bench": "pve"})
	keyed, err := httpClient(t, ts.URL, map[string]string{"X-Bench-Key": benchKey})
	if err != nil {
		t.Fatal(err)
	}
	call(t, keyed, "bench_status", nil)

	lines := logLines(t, buf.String())
	tl := toolLine(t, lines, "stand_plan")
	req := tl["req"]
	if boot, n, ok := strings.Cut(req, "-"); !ok || len(boot) != 6 || n == "" || tl["bench"] != "pve" || tl["outcome"] != "ok" || tl["ms"] == "" {
		t.Fatalf("tool line %v", tl)
	}
	if n, err := strconv.Atoi(tl["rpc"]); err != nil || n < 1 {
		t.Fatalf("tool line rpc=%q: want the client's JSON-RPC id", tl["rpc"])
	}
	if len(withReq(lines, "pve: request", req)) == 0 {
		t.Errorf("no PVE request line with req=%s:\n%s", req, buf)
	}
	m := withReq(lines, "model", req)
	if len(m) != 1 || m[0]["model"] != "planner-test" || m[0]["seq"] != "1" {
		t.Errorf("model lines with req=%s: %v", req, m)
	}
	if other := toolLine(t, lines, "vm_list_templates"); other["req"] == req || other["rpc"] == "" {
		t.Errorf("another call's tool line %v", other)
	}
	text := buf.String()
	secrets := []string{"tester-token-0123456789", planKey, benchKey, benchPW}
	for _, tok := range []string{lab.alice, lab.carol, lab.bob, lab.dave, lab.erin, lab.fred} {
		secrets = append(secrets, tok[strings.LastIndex(tok, "=")+1:])
	}
	for _, sec := range secrets {
		if strings.Contains(text, sec) {
			t.Errorf("the debug log holds the secret %s...", sec[:6])
		}
	}
}

// A script tool whose expect fails: its tool line stops where the guest's
// output begins and says how much was cut; log_payload adds the whole text
// at debug, with the same req.
func TestToolErrorCutAtPayload(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{Agent: true})
	cfg := lab.config(t, lab.alice)
	cfg.ScriptsDir = t.TempDir()
	leak := `module.exports = { name: "leak", description: "fails with a secret in its output",
  run(vm) { vm.expect("echo password=hunter2; exit 1"); } };`
	if err := os.WriteFile(filepath.Join(cfg.ScriptsDir, "leak.js"), []byte(leak), 0o644); err != nil {
		t.Fatal(err)
	}
	s, buf := loggedServer(t, cfg)
	cs := connect(t, s)
	vmid := lab.clone(t, cs, "leak")
	lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid})
	if out := lab.ok(t, cs, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 30}); !strings.HasPrefix(out, "booted") {
		t.Fatalf("vm_wait_boot = %q", out)
	}
	out, res := call(t, cs, "vm_leak", map[string]any{"vmid": vmid})
	if !res.IsError || !strings.Contains(out, "hunter2") {
		t.Fatalf("vm_leak = %q: the model should read the output", out)
	}
	tl := toolLine(t, logLines(t, buf.String()), "vm_leak")
	if !strings.HasSuffix(tl["error"], "expect failed: exitcode 1") || tl["outcome"] != "error" {
		t.Errorf("error=%q: want it to stop where the output begins", tl["error"])
	}
	if n, _ := strconv.Atoi(tl["error_chars"]); n < len(`, stdout "password=hunter2\n"`) {
		t.Errorf("error_chars=%q", tl["error_chars"])
	}
	if strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("the guest's output is in the log:\n%s", buf)
	}

	cfg.LogPayload = true
	call(t, cs, "vm_leak", map[string]any{"vmid": vmid})
	lines := logLines(t, buf.String())
	tl = toolLine(t, lines, "vm_leak")
	full := withReq(lines, "tool error payload", tl["req"])
	if len(full) != 1 || !strings.Contains(full[0]["error"], "password=hunter2") {
		t.Fatalf("log_payload: lines with req=%s: %v", tl["req"], full)
	}
}
