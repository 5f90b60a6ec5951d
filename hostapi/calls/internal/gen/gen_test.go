package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/poligon/poligon/hostapi/calls"
)

// TestGeneratedFilesAreCurrent regenerates every file from the registry
// and compares it with the checked-in one, as a docs check does: a call
// added, changed or removed in hostapi/calls without go generate fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := generate(root, calls.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{preludeFile, dtsFile, sdkFile} {
		want := files[name]
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is not what hostapi/calls/registry.go generates: run `go generate ./hostapi/calls`\n%s",
				name, firstDifference(string(got), string(want)))
		}
	}
}

func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "first difference at line " + strconv.Itoa(i+1) + ":\n\thave: " + gl + "\n\twant: " + wl
		}
	}
	return ""
}

// The SDK verbs written by hand exist: the generator leaves them out.
func TestHandWrittenSDKVerbsExist(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	dir := filepath.Join(root, "stdlib", "go", "poligon")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") && e.Name() != filepath.Base(sdkFile) {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	for _, c := range calls.Registry {
		if c.GoByHand && !strings.Contains(src.String(), ") "+c.Go+"(") {
			t.Errorf("%s: GoByHand, but stdlib/go/poligon declares no verb %s", c.Name, c.Go)
		}
	}
}

// A mistake in a registry entry stops the generator with its reason.
func TestRegistryMistakesAreReported(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	exec, _ := calls.Lookup(calls.Exec)
	for _, tc := range []struct {
		what   string
		change func(c *calls.Call)
		want   string
	}{
		{"an option that is no field", func(c *calls.Call) { c.Options = []calls.Option{{Name: "timout"}} },
			`"exec": option timout is no field of ExecArgs`},
		{"a param that is no field", func(c *calls.Call) { c.Params = []calls.Param{{Name: "cmd"}} },
			`"exec": param cmd fills no field of ExecArgs`},
		{"a string default of a number", func(c *calls.Call) { c.Options = []calls.Option{{Name: "timeout", Default: "60"}} },
			`"exec": option timeout: a string default for a float64`},
		{"options before params", func(c *calls.Call) {
			c.Params, c.Options = []calls.Param{{Name: "timeout"}}, []calls.Option{{Name: "command"}}
		}, `"exec": params then options must follow ExecArgs's field order (command, timeout), not timeout, command`},
		{"a required field as an option", func(c *calls.Call) {
			c.Params, c.Options = nil, []calls.Option{{Name: "command"}, {Name: "timeout"}}
		}, `"exec": option command: its field must be omitempty`},
		{"an unknown result", func(c *calls.Call) { c.Result = calls.Result{JS: "shout"} },
			`"exec": Result "shout" is none of calls.As*`},
		{"an options struct without options", func(c *calls.Call) { c.Options = nil },
			`"exec": GoOpts names the options struct of a call with options, and only then`},
		{"a shared options struct with other options", func(c *calls.Call) { c.GoOpts = "PowerOpts" },
			`shares PowerOpts with`},
		{"a param shadowing the prelude", func(c *calls.Call) { c.Params = []calls.Param{{Name: "call", Field: "command"}} },
			`"exec": param call would shadow the prelude's call`},
		{"a name without its constant", func(c *calls.Call) { c.Name = "exce" },
			`"exce": no constant of package calls has this name`},
	} {
		registry := append([]calls.Call(nil), calls.Registry...)
		for i := range registry {
			if registry[i].Name == calls.Exec {
				c := exec
				tc.change(&c)
				registry[i] = c
			}
		}
		_, err := load(root, registry)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %s", tc.what, err, tc.want)
		}
	}
	shot, _ := calls.Lookup(calls.Shot)
	if _, err := load(root, append(append([]calls.Call(nil), calls.Registry...), shot)); err == nil ||
		!strings.Contains(err.Error(), `"screen.shot": registered twice`) || !strings.Contains(err.Error(), `the calls of vm.screen follow one another`) {
		t.Errorf("a group's call apart from the others: %v", err)
	}
	if _, err := load(root, calls.Registry[1:]); err == nil || !strings.Contains(err.Error(), `calls.Exec ("exec") has no Registry entry`) {
		t.Errorf("a call constant without its entry: %v", err)
	}
}
