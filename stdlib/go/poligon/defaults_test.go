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
	"strings"
	"testing"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi/calls"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/js"
)

// The defaults of the host API have one owner, calls.Defaults (and
// runtime.DefaultLimits / DefaultTool for runs); the TypeScript
// declarations, this SDK, the JS runtime and the config must say the same.

// sdkOpts maps each option struct of the SDK to the calls it serves.
var sdkOpts = map[string][]string{
	"ExecOpts":       {calls.Exec, calls.Check},
	"ExpectOpts":     {calls.Expect},
	"RunOpts":        {calls.RunDetached},
	"WaitBootOpts":   {calls.WaitBoot},
	"ExecGUIOpts":    {calls.ExecGUI},
	"ReadFileOpts":   {calls.ReadFile},
	"WaitStillOpts":  {calls.WaitStill},
	"WaitChangeOpts": {calls.WaitChange},
	"WaitWindowOpts": {calls.WaitWindow},
	"ClickOpts":      {calls.Click},
	"PowerOpts":      {calls.Start, calls.Stop, calls.Snapshot, calls.Rollback},
}

// dtsVerbs maps each verb of stdlib/poligon.d.ts to its call.
var dtsVerbs = map[string]string{
	"exec": calls.Exec, "expect": calls.Expect, "check": calls.Check, "run": calls.RunDetached,
	"waitBoot": calls.WaitBoot, "execGui": calls.ExecGUI, "file.read": calls.ReadFile,
	"screen.waitStill": calls.WaitStill, "screen.waitChange": calls.WaitChange, "screen.waitWindow": calls.WaitWindow,
	"mouse.click": calls.Click, "power.start": calls.Start, "power.stop": calls.Stop,
	"power.snapshot": calls.Snapshot, "power.rollback": calls.Rollback,
}

// value renders a default as the docs write it: 120, "test".
func value(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

var sdkDefault = regexp.MustCompile(`default ("[^"]*"|[0-9a-z]+)`)

func TestSDKDocumentsTheHostDefaults(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range pkgs["poligon"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, field := range st.Fields.List {
				if len(field.Names) == 0 {
					continue
				}
				option := strings.ToLower(field.Names[0].Name)
				doc := field.Comment.Text()
				m := sdkDefault.FindStringSubmatch(doc)
				if ts.Name.Name == "Script" && option == "timeout" {
					if m == nil || m[1] != runtime.DefaultLimits.Timeout.String() && m[1]+"0s" != runtime.DefaultLimits.Timeout.String() {
						t.Errorf("Script.Timeout says %q; runtime.DefaultLimits.Timeout is %s", doc, runtime.DefaultLimits.Timeout)
					}
					continue
				}
				callNames, ok := sdkOpts[ts.Name.Name]
				if !ok {
					continue
				}
				seen[ts.Name.Name] = true
				for _, call := range callNames {
					want, has := calls.Defaults[call][option]
					switch {
					case !has && m != nil:
						t.Errorf("%s.%s documents default %s; calls.Defaults[%s] has none", ts.Name.Name, field.Names[0].Name, m[1], call)
					case has && m == nil:
						t.Errorf("%s.%s documents no default; calls.Defaults[%s][%s] is %s", ts.Name.Name, field.Names[0].Name, call, option, value(want))
					case has && m[1] != value(want):
						t.Errorf("%s.%s documents default %s; calls.Defaults[%s][%s] is %s", ts.Name.Name, field.Names[0].Name, m[1], call, option, value(want))
					}
				}
			}
			return false
		})
	}
	for name := range sdkOpts {
		if !seen[name] {
			t.Errorf("the SDK has no option struct %s any more: update sdkOpts", name)
		}
	}
}

var (
	dtsGroup    = regexp.MustCompile(`^\s{4}(\w+): \{$`)
	dtsMethod   = regexp.MustCompile(`^\s*(\w+)\(`)
	dtsDefaults = regexp.MustCompile(`Defaults: ([^*]*?)\.?\s*(\*/|$)`)
	dtsPair     = regexp.MustCompile(`(\w+) ("[^"]*"|[\w.]+)`)
)

// dtsDefaultsOf reads the "Defaults:" line of every verb of the d.ts.
func dtsDefaultsOf(t *testing.T) map[string]map[string]string {
	src, err := os.ReadFile(filepath.Join("..", "..", "poligon.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	group, pending := "", map[string]string(nil)
	for _, line := range strings.Split(string(src), "\n") {
		if m := dtsGroup.FindStringSubmatch(line); m != nil {
			group = m[1] + "."
			continue
		}
		if strings.TrimSpace(line) == "};" {
			group = ""
		}
		if m := dtsDefaults.FindStringSubmatch(line); m != nil {
			pending = map[string]string{}
			for _, p := range dtsPair.FindAllStringSubmatch(m[1], -1) {
				pending[p[1]] = p[2]
			}
		}
		if strings.Contains(line, "/*") && !strings.Contains(line, "Defaults:") && !strings.Contains(line, "*/") {
			pending = nil // a new comment block starts
		}
		if m := dtsMethod.FindStringSubmatch(line); m != nil && !strings.Contains(line, "*") {
			out[group+m[1]] = pending
			pending = nil
		} else if m := regexp.MustCompile(`^\s*(\w+)\?: `).FindStringSubmatch(line); m != nil && pending != nil {
			out["Script."+m[1]] = pending
			pending = nil
		}
	}
	return out
}

func TestTypeScriptDeclaresTheHostDefaults(t *testing.T) {
	got := dtsDefaultsOf(t)
	for verb, call := range dtsVerbs {
		doc := got[verb]
		for option, want := range calls.Defaults[call] {
			if doc[option] != value(want) {
				t.Errorf("poligon.d.ts %s: Defaults says %s %q; calls.Defaults[%s] is %s", verb, option, doc[option], call, value(want))
			}
		}
		for option, v := range doc {
			if _, ok := calls.Defaults[call][option]; !ok {
				t.Errorf("poligon.d.ts %s: Defaults names %s %s, which calls.Defaults[%s] does not have", verb, option, v, call)
			}
		}
	}
	if d := got["Script.tool"]["tool"]; d != strconv.FormatBool(runtime.DefaultTool) {
		t.Errorf("poligon.d.ts Script.tool defaults to %q; runtime.DefaultTool is %v", d, runtime.DefaultTool)
	}
	if d := got["Script.timeout"]["timeout"]; d != fmt.Sprint(runtime.DefaultLimits.Timeout.Seconds()) {
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
