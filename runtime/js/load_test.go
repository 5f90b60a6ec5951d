package js

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

func TestLoadManifest(t *testing.T) {
	m := mustLoad(t, `// a recipe
module.exports = {
  name: "login",
  description: "log in",
  title: "Log into the desktop",
  params: {
    user: { description: "desktop user", default: "test" },
    session: {},
    password: { description: "secret" },
  },
  tool: false,
  timeout: 90,
  run(vm, p) {},
};`)
	got := m.Manifest()
	test := "test"
	want := runtime.Manifest{
		Name: "login", Description: "log in", Title: "Log into the desktop", Tool: false, Timeout: 90 * time.Second,
		Params: []runtime.Param{
			{Name: "user", Description: "desktop user", Default: &test},
			{Name: "session"},
			{Name: "password", Description: "secret"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("manifest = %+v\nwant %+v", got, want)
	}
}

func TestLoadDefaults(t *testing.T) {
	m := mustLoad(t, `exports.name = "plain"; exports.description = "d"; exports.run = function () {};`)
	got := m.Manifest()
	if !got.Tool || got.Timeout != 0 || len(got.Params) != 0 || got.Recipes != nil {
		t.Fatalf("manifest = %+v, want a tool with no params, no timeout, no recipes", got)
	}
}

func TestLoadErrors(t *testing.T) {
	defer func(d time.Duration) { loadTimeout = d }(loadTimeout)
	loadTimeout = 200 * time.Millisecond
	const ok = `name: "x", description: "d", run() {}`
	for _, c := range []struct{ src, want, where string }{
		{`module.exports = {name: "Bad-Name", description: "d", run() {}};`, `manifest: name "Bad-Name" must match`, ""},
		{`module.exports = {description: "d", run() {}};`, "manifest: name is missing", ""},
		{`module.exports = {name: "x", run() {}};`, "manifest: description is missing", ""},
		{`module.exports = {name: "x", description: "d"};`, "manifest: run must be a function", ""},
		{`module.exports = {name: "x", description: "d", run: "go"};`, "manifest: run must be a function", ""},
		{`module.exports = {` + ok + `, params: ["user"]};`, "manifest: params must be an object", ""},
		{`module.exports = {` + ok + `, params: {user: "test"}};`, `manifest: param "user" must be an object {description, default}, not the string "test"`, ""},
		{`module.exports = {` + ok + `, params: {user: {default: 5}}};`, `manifest: param "user": default must be a string, not the number 5`, ""},
		{`module.exports = {` + ok + `, params: {user: {desc: "x"}}};`, `manifest: param "user" has an unknown key "desc"`, ""},
		{`module.exports = {` + ok + `, params: {vmid: {}}};`, `manifest: param "vmid" is declared twice or is reserved`, ""},
		{`module.exports = {` + ok + `, title: 5};`, `manifest: title must be a string, not the number 5`, ""},
		{`module.exports = {` + ok + `, title: "two\nlines"};`, `manifest: title must be one line`, ""},
		{`module.exports = {` + ok + `, tool: "yes"};`, `manifest: tool must be true or false, not the string "yes"`, ""},
		{`module.exports = {` + ok + `, timeout: -1};`, "manifest: timeout must be a positive number of seconds", ""},
		{`module.exports = 42;`, "manifest: the script exports nothing", ""},
		{`// nothing exported`, "manifest: name is missing", ""},
		{"import fs from \"fs\";\nmodule.exports = {};", "ES module syntax (import/export) is not supported", "t.js:1:1"},
		{"const x = 1;\nexport default {name: \"x\"};", "use require(\"...\") and module.exports = {...}", "t.js:2:1"},
		{"module.exports = {\n  name: \"x\" \"y\",\n};", "SyntaxError: Unexpected string", "t.js:2:13"},
		{"const a = 1; const a = 2;", "SyntaxError: Identifier 'a' has already been declared", "t.js:1:20"},
		{"\n\nthrow new Error(\"no config\");", "no config", "t.js:3:7"},
		{"while (true) {}", "script time limit 200ms reached", "t.js:1:"},
		{`require("fs");`, `require("fs"): Node.js modules are not available in the sandbox`, "t.js:1:8"},
	} {
		_, err := Load("scripts/t.js", []byte(c.src), Options{})
		var se *runtime.ScriptError
		if !errors.As(err, &se) {
			t.Fatalf("%s: error %v is not a *runtime.ScriptError", c.src, err)
		}
		contains(t, err.Error(), c.want)
		if se.Script != "scripts/t.js" || !strings.HasPrefix(se.Where, c.where) || (c.where == "") != (se.Where == "") {
			t.Fatalf("%s: script %q where %q, want where %q", c.src, se.Script, se.Where, c.where)
		}
	}
}

func TestRecipeCallsFromAST(t *testing.T) {
	m := mustLoad(t, `
const name = "dyn";
module.exports = {
  name: "stand", description: "d",
  run(vm, p) {
    vm.recipe("login", {user: p.user, "session": "x"});
    const r = vm.recipe("reset");
    if (p.x) { helper(vm).recipe("net", {ip}); }
    vm.recipe("spread", {...p});
    vm.recipe("computed", {[name]: 1});
    vm.recipe("passed", p);
    vm.recipe(name, {a: 1});
    vm.exec("recipe");
  },
};
var recipeObj = { recipe: 1 };
`)
	want := []runtime.RecipeCall{
		{Name: "login", Params: []string{"user", "session"}},
		{Name: "reset", Params: []string{}},
		{Name: "net", Params: []string{"ip"}},
		{Name: "spread"},
		{Name: "computed"},
		{Name: "passed"},
	}
	if got := m.Manifest().Recipes; !reflect.DeepEqual(got, want) {
		t.Fatalf("recipes = %#v\nwant %#v", got, want)
	}
}

func BenchmarkLoad(b *testing.B) {
	src := []byte(script(`vm.exec("true"); return vm.recipe("login", {user: params.user});`))
	for b.Loop() {
		if _, err := Load("scripts/t.js", src, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
