package engine

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
)

// fakeBench serves every caller with one in-memory backend: the engine
// takes any Bench, so tool calls, scripts and recipes run without a VM.
type fakeBench struct{ be *backendtest.Backend }

func (f fakeBench) Open(ctx context.Context, who hostapi.Credentials) (backends.Backend, string, error) {
	return f.be, "fake", nil
}
func (fakeBench) Problems() []string { return nil }
func (fakeBench) Consoles() int      { return 0 }
func (fakeBench) Facts() map[string]string {
	return map[string]string{"type": "test"}
}
func (fakeBench) Close() {}

// A JS tool script calls a Wasm script as a recipe and leaves its param
// out: the Wasm script runs with the param's default, as it would as a tool
// (Manifest.Bind in every runtime), and the backend saw exactly that.
func TestWasmRecipeGetsItsDefaults(t *testing.T) {
	be := backendtest.New("")
	be.AddVM(backends.VM{VMID: 101, Name: "tester-repro-r", Status: "running"})
	be.SetExec(func(vmid int, req backends.ExecRequest) backends.ExecStatus {
		return backends.ExecStatus{Exited: true, Stdout: []byte("ran: " + req.Args[len(req.Args)-1])}
	})
	cfg := testConfig(t, t.TempDir())
	cfg.ScriptsDir = t.TempDir()
	buildWasm(t, "../runtime/wasm/testdata/uname", filepath.Join(cfg.ScriptsDir, "uname.wasm"))
	os.WriteFile(filepath.Join(cfg.ScriptsDir, "outer.js"), []byte(`module.exports = {
  name: "outer", description: "calls the Wasm uname as a recipe, without its flags",
  run(vm) { return vm.recipe("uname"); } };`), 0o644)
	s := testServer(t, cfg, app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) { return fakeBench{be}, nil }})
	cs := connect(t, s)
	out := mustOK(t, cs, "vm_outer", map[string]any{"vmid": 101})
	if !strings.Contains(out, "uname -a") {
		t.Fatalf("vm_outer = %q, want the recipe's uname -a", out)
	}
	execs := be.CallsOf("ExecStart")
	if len(execs) != 1 || !strings.HasSuffix(execs[0].Detail.(backends.ExecRequest).Args[1], "uname -a") {
		t.Fatalf("the backend saw %v, want one uname -a", be.Calls())
	}
}
