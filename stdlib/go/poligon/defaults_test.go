package poligon

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/js"
)

// The defaults of a run have one owner, runtime.DefaultLimits and
// runtime.DefaultTool; the hand-written Script docs of the TypeScript
// declarations and of this SDK, the JS runtime and the config must say the
// same. (The host calls' defaults are generated into both from
// hostapi/calls.Registry, and a test there holds the files to it.)

func TestSDKDocumentsTheScriptTimeout(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "script.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Script" {
			for _, field := range ts.Type.(*ast.StructType).Fields.List {
				if len(field.Names) > 0 && field.Names[0].Name == "Timeout" {
					doc = field.Comment.Text()
				}
			}
		}
		return true
	})
	m := regexp.MustCompile(`default ([0-9a-z]+)`).FindStringSubmatch(doc)
	if m == nil || m[1] != runtime.DefaultLimits.Timeout.String() && m[1]+"0s" != runtime.DefaultLimits.Timeout.String() {
		t.Errorf("Script.Timeout says %q; runtime.DefaultLimits.Timeout is %s", doc, runtime.DefaultLimits.Timeout)
	}
}

var dtsScriptDefault = regexp.MustCompile(`Defaults: (\w+) ([\w.]+)\.\s*\*/\s*\n\s*(\w+)\?: `)

func TestTypeScriptDeclaresTheScriptDefaults(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "poligon.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range dtsScriptDefault.FindAllStringSubmatch(string(src), -1) {
		if m[1] == m[3] {
			got[m[1]] = m[2]
		}
	}
	if d := got["tool"]; d != strconv.FormatBool(runtime.DefaultTool) {
		t.Errorf("poligon.d.ts Script.tool defaults to %q; runtime.DefaultTool is %v", d, runtime.DefaultTool)
	}
	if d := got["timeout"]; d != fmt.Sprint(runtime.DefaultLimits.Timeout.Seconds()) {
		t.Errorf("poligon.d.ts Script.timeout defaults to %q s; runtime.DefaultLimits.Timeout is %s", d, runtime.DefaultLimits.Timeout)
	}
}

// The runtimes and the config start from the same defaults: a JS script
// without tool: is a tool (as a Wasm one without Recipe is), and the
// config's limits are runtime.DefaultLimits.
func TestRuntimesAndConfigShareTheDefaults(t *testing.T) {
	m, err := js.Load("t.js", []byte(`module.exports = {name: "t", description: "d", run() {}};`), js.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Manifest().Tool != runtime.DefaultTool {
		t.Errorf("a JS script without tool: has Tool %v; runtime.DefaultTool is %v", m.Manifest().Tool, runtime.DefaultTool)
	}
	var s Script
	if (manifest{Tool: !s.Recipe}).Tool != runtime.DefaultTool {
		t.Errorf("a Go SDK script without Recipe is not a tool")
	}
	cfg, problems := config.Load("", false, func(string) string { return "" })
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if cfg.Limits.ScriptTimeout.Duration != runtime.DefaultLimits.Timeout || cfg.Limits.ScriptMemoryMB != runtime.DefaultLimits.MemoryMB {
		t.Errorf("config limits %s / %d MB; runtime.DefaultLimits %s / %d MB", cfg.Limits.ScriptTimeout.Duration,
			cfg.Limits.ScriptMemoryMB, runtime.DefaultLimits.Timeout, runtime.DefaultLimits.MemoryMB)
	}
}
