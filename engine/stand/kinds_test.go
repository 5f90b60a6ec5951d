package stand

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// Each kind's argument: what is accepted, and what is said about the rest.
func TestKindArgs(t *testing.T) {
	for _, c := range []struct {
		kind, arg string
		want      []string // nil: valid
	}{
		{"exec", `"ls"`, nil},
		{"exec", `{"command": "ls", "timeout": 3600}`, nil},
		{"exec", `""`, []string{"exec is empty"}},
		{"exec", `5`, []string{"the argument must be a command string, or {command, timeout=120}, not a number"}},
		{"exec", `{"command": "ls", "timeout": "30"}`, []string{`timeout must be a number of seconds, not a string ("30")`}},
		{"exec", `{"command": "ls", "timeout": 0}`, []string{"timeout must be more than 0, not 0"}},
		{"exec", `{"command": "ls", "timeout": 3601}`, []string{"timeout must be at most 3600, not 3601"}},
		{"exec", `{"cmd": "ls"}`, []string{`unknown key "cmd" (the argument is a command string, or {command, timeout=120})`, "command is missing"}},
		{"exec_gui", `{"command": "kcalc", "user": "test"}`, nil},
		{"exec_gui", `"kcalc"`, []string{"the argument must be {command, user=test}, not a string"}},
		{"exec_gui", `{"command": "kcalc", "user": ""}`, []string{"user is empty (leave it out for test)"}},
		{"expect", `{"command": "true", "contains": ""}`, nil},
		{"expect", `{"command": "true", "contains": 5}`, []string{"contains must be a string, not 5"}},
		{"expect", `{"command": ["true"]}`, []string{"command must be a string, not an array"}},
		{"wait_boot", `60`, nil},
		{"wait_boot", `"60"`, []string{`seconds must be a number of seconds, not a string ("60")`}},
		{"wait_boot", `3601`, []string{"seconds must be at most 3600, not 3601"}},
		{"sleep", `600`, nil},
		{"sleep", `0.5`, nil},
		{"sleep", `-1`, []string{"seconds must be more than 0, not -1"}},
		{"sleep", `601`, []string{"sleep 601 s is longer than the limit of 600 s: wait for the condition instead (expect with a timeout, wait_boot)"}},
		{"screenshot", `""`, nil},
		{"screenshot", `"shots/a.png"`, nil},
		{"screenshot", `"/etc/passwd"`, []string{`path "/etc/passwd" leaves the evidence directory: give a relative path inside it, like shots/login.png`}},
		{"screenshot", `"a/../../b.png"`, []string{`path "a/../../b.png" leaves the evidence directory: give a relative path inside it, like shots/login.png`}},
		{"screenshot", `null`, []string{`the argument must be a path string (or "" for the image only), not null`}},
		{"click", `{"x": 0, "y": 0, "button": "middle", "count": 3}`, nil},
		{"click", `{"x": 1.5, "y": "2"}`, []string{"x must be a whole number of console pixels ≥ 0, not 1.5", `y must be a whole number of console pixels ≥ 0, not a string ("2")`}},
		{"click", `{"x": 1}`, []string{"y is missing"}},
		{"click", `{"x": 1, "y": 1, "button": "double", "count": 0}`, []string{`button "double" is not left, middle or right`, "count must be 1, 2 or 3 (clicks), not 0"}},
		{"click", `[1, 2]`, []string{"the argument must be {x, y, button=left, count=1}, not an array"}},
		{"click_label", `{"label": "OK", "type": "list item"}`, nil},
		{"click_label", `{"label": ""}`, []string{"label is empty"}},
		{"click_label", `{"label": "OK", "type": "widget"}`, []string{`type "widget" is not an element kind (one of: button, link, field, checkbox, radio, tab, menu, menuitem, list item, icon, text, window, other)`}},
		{"drag", `{"x1": 1, "y1": 2, "x2": 3, "y2": 4}`, nil},
		{"drag", `{"x1": 1, "y1": 2, "x2": 3}`, []string{"y2 is missing"}},
		{"type", `"hello"`, nil},
		{"type", `"` + strings.Repeat("я", 4096) + `"`, nil},
		{"type", `"` + strings.Repeat("a", 4097) + `"`, []string{"the text is 4097 characters; at most 4096 fit one step: split it"}},
		{"type", `""`, []string{"the text is empty"}},
		{"key", `"ctrl-alt-f2"`, nil},
		{"key", `"kp_enter"`, nil},
		{"key", `"ctrl+c"`, []string{`"ctrl+c" is not a qemu sendkey name: lowercase names joined by "-", like ret, tab, esc, ctrl-alt-f2 (type text with a type step)`}},
		{"key", `"ctrl-"`, []string{`"ctrl-" is not a qemu sendkey name: lowercase names joined by "-", like ret, tab, esc, ctrl-alt-f2 (type text with a type step)`}},
		{"snapshot", `"clean"`, nil},
		{"rollback", `" "`, []string{"the snapshot name is empty"}},
		{"recipe", `{"name": "install", "packages": "nginx"}`, nil},
		{"recipe", `{"packages": "nginx"}`, []string{"name is missing: {name, <param>: <value>, ...}"}},
		{"recipe", `{"name": "x", "count": 5}`, []string{`param count must be a string, not 5 (every recipe param is a string, like "5")`}},
		{"recipe", `"install"`, []string{"the argument must be an object {name, <param>: <value>, ...}, not a string"}},
		{"script", `{"name": "login", "params": {"user": "u"}}`, nil},
		{"script", `{"name": "login", "user": "u"}`, []string{`unknown key "user" (the argument is {name, params: {<param>: <value>, ...}})`}},
		{"script", `{"name": "login", "params": {"n": 1}}`, []string{"param n must be a string, not 1"}},
		{"script", `{"name": "login", "params": {"password": 1234}}`, []string{"param password must be a string, not a number"}},
		{"recipe", `{"name": "login", "api_token": 1234}`, []string{`param api_token must be a string, not a number (every recipe param is a string, like "5")`}},
		{"script", `{"name": "login", "params": []}`, []string{"params must be an object {<param>: <value>, ...}, not an array"}},
	} {
		k, ok := kindNamed(c.kind)
		if !ok {
			t.Fatalf("no kind %s", c.kind)
		}
		_, got := k.parse(json.RawMessage(c.arg))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %.60s:\n got %q\nwant %q", c.kind, c.arg, got, c.want)
		}
	}
}

// Kinds is the planner's table: every kind documented once, and the
// every-kind golden plan uses each, so each compiles and runs.
func TestKindsTable(t *testing.T) {
	used := map[string]bool{}
	for _, m := range mustResolve(t, goldenPlans(t)["allkinds"]).Machines {
		for _, s := range m.Steps {
			used[s.Kind] = true
		}
	}
	seen := map[string]bool{}
	for _, k := range Kinds {
		if k.Name == "" || k.Args == "" || k.Fails == "" || seen[k.Name] {
			t.Fatalf("bad or repeated entry %+v", k)
		}
		seen[k.Name] = true
		if !used[k.Name] {
			t.Errorf("testdata/compile/allkinds.json has no %s step", k.Name)
		}
	}
	if len(Kinds) != 15 {
		t.Fatalf("%d kinds, want the manual's 14 and script", len(Kinds))
	}
}
