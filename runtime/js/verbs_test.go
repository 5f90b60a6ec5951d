package js

import (
	"cmp"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/poligon/poligon/hostapi/calls"
)

// TestVerbs checks every verb of poligon.d.ts: the call it makes, its
// arguments, and what it answers the script from the host's answer.
func TestVerbs(t *testing.T) {
	exec := `{"exit":0,"stdout":"out\n","stderr":""}`
	cases := []struct {
		js     string // an expression using vm
		call   string
		args   string
		answer string // the host's answer
		want   string // the expression's value, as JSON
	}{
		{`vm.exec("ls /")`, calls.Exec, `{"command":"ls /"}`, exec, exec},
		{`vm.exec("ls", {timeout: 5})`, calls.Exec, `{"command":"ls","timeout":5}`, exec, exec},
		{`vm.expect("id", {timeout: 9, contains: "root"})`, calls.Expect, `{"command":"id","timeout":9,"contains":"root"}`, exec, `"out\n"`},
		{`vm.check("test -f /x")`, calls.Check, `{"command":"test -f /x"}`, `{"ok":true,"exit":0,"stdout":"yes","stderr":""}`, `"yes"`},
		{`vm.check("test -f /x", {timeout: 3})`, calls.Check, `{"command":"test -f /x","timeout":3}`, `{"ok":false,"exit":1,"stdout":"","stderr":""}`, `null`},
		{`vm.run("make", {wait: 10, restart: true})`, calls.RunDetached, `{"command":"make","wait":10,"restart":true}`,
			`{"state":"running","exit":0,"seconds":10,"tail":"cc"}`, `{"state":"running","exit":0,"seconds":10,"tail":"cc"}`},
		{`vm.waitBoot({timeout: 30})`, calls.WaitBoot, `{"timeout":30}`, `{"ok":true,"seconds":4.5}`, `4.5`},
		{`vm.waitBoot()`, calls.WaitBoot, `{}`, `{"ok":false,"seconds":60}`, `null`},
		{`vm.execGui("xterm", {user: "bob"})`, calls.ExecGUI, `{"command":"xterm","user":"bob"}`, `{"running":true,"output":""}`, `{"running":true,"output":""}`},
		{`vm.file.read("/etc/hostname", {offset: 2, max: 10})`, calls.ReadFile, `{"path":"/etc/hostname","offset":2,"max":10}`,
			`{"base64":"aMOpbGxv","size":6}`, `"héllo"`},
		{`vm.file.write("/tmp/a", "text")`, calls.WriteFile, `{"path":"/tmp/a","text":"text"}`, `{}`, `null`},
		{`vm.screen.shot()`, calls.Shot, `{}`, `{"image":"shot-1","width":800,"height":600,"digest":"ab"}`,
			`{"image":"shot-1","width":800,"height":600,"digest":"ab"}`},
		{`vm.screen.waitStill({seconds: 1, timeout: 5})`, calls.WaitStill, `{"seconds":1,"timeout":5}`, `{"ok":true,"seconds":1.2}`, `1.2`},
		{`vm.screen.waitChange({timeout: 5})`, calls.WaitChange, `{"timeout":5}`, `{"ok":false,"seconds":5}`, `null`},
		{`vm.screen.waitWindow("Firefox", {timeout: 3, user: "u"})`, calls.WaitWindow, `{"window":"Firefox","timeout":3,"user":"u"}`,
			`{"ok":true,"seconds":1,"x":1,"y":2,"w":3,"h":4}`, `{"x":1,"y":2,"w":3,"h":4}`},
		{`vm.screen.waitWindow("Firefox", {gone: true})`, calls.WaitWindow, `{"window":"Firefox","gone":true}`,
			`{"ok":false,"seconds":20,"x":0,"y":0,"w":0,"h":0}`, `null`},
		{`vm.keyboard.type("Hello!")`, calls.Type, `{"text":"Hello!"}`, `{}`, `null`},
		{`vm.keyboard.press("ctrl-alt-f2")`, calls.Press, `{"key":"ctrl-alt-f2"}`, `{}`, `null`},
		{`vm.mouse.click(10, 20, {button: "right", count: 2})`, calls.Click, `{"x":10,"y":20,"button":"right","count":2}`, `{}`, `null`},
		{`vm.mouse.click(10, 20)`, calls.Click, `{"x":10,"y":20}`, `{}`, `null`},
		{`vm.mouse.doubleClick(1, 2)`, calls.DoubleClick, `{"x":1,"y":2}`, `{}`, `null`},
		{`vm.mouse.drag(1, 2, 3, 4)`, calls.Drag, `{"x1":1,"y1":2,"x2":3,"y2":4}`, `{}`, `null`},
		{`vm.mouse.move(5, 6)`, calls.Move, `{"x":5,"y":6}`, `{}`, `null`},
		{`vm.power.start({wait: 30})`, calls.Start, `{"wait":30}`, `{}`, `null`},
		{`vm.power.stop()`, calls.Stop, `{}`, `{}`, `null`},
		{`vm.power.snapshot("clean")`, calls.Snapshot, `{"name":"clean"}`, `{}`, `null`},
		{`vm.power.rollback("clean", {wait: 20})`, calls.Rollback, `{"name":"clean","wait":20}`, `{}`, `null`},
		{`vm.evidence.save("login.png")`, calls.SaveShot, `{"path":"login.png"}`, `{"path":"run-1/login.png"}`, `"run-1/login.png"`},
		{`vm.evidence.save("a.png", {image: "shot-3", width: 1, height: 1, sha256: ""})`, calls.SaveShot,
			`{"path":"a.png","image":"shot-3"}`, `{"path":"run-1/a.png"}`, `"run-1/a.png"`},
		{`vm.log("step 1")`, calls.Log, `{"message":"step 1"}`, `{}`, `null`},
		{`vm.recipe("login", {user: "u"})`, calls.Recipe, `{"name":"login","params":{"user":"u"}}`, `"logged in"`, `"logged in"`},
		{`vm.recipe("reset")`, calls.Recipe, `{"name":"reset"}`, `{"done":true}`, `{"done":true}`},
		{`vm.sleep(1.5)`, calls.Sleep, `{"seconds":1.5}`, `{}`, `null`},
	}
	for _, c := range cases {
		t.Run(c.js, func(t *testing.T) {
			h := newFakeHost()
			h.answers[c.call] = c.answer
			res, err := runWith(t, mustLoad(t, script("return "+c.js+";")), h)
			if err != nil {
				t.Fatal(err)
			}
			got := h.recorded()
			if len(got) != 1 || got[0].Name != c.call {
				t.Fatalf("calls = %+v, want one %s", got, c.call)
			}
			sameJSON(t, "args", got[0].Args, c.args)
			sameJSON(t, "answer", string(res.Value), c.want)
		})
	}
}

func sameJSON(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%s %q: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// TestVerbArgumentChecks: wrong types and unknown options fail in the
// script, before any host call.
func TestVerbArgumentChecks(t *testing.T) {
	for js, want := range map[string]string{
		`vm.exec(42)`:                       "vm.exec: command must be a string, not number",
		`vm.exec("ls", {timout: 5})`:        "vm.exec: unknown option timout (known: timeout)",
		`vm.exec("ls", 5)`:                  "vm.exec: options must be an object, not number",
		`vm.mouse.click("1", 2)`:            "vm.mouse.click: x must be a number, not string",
		`vm.recipe("x", ["a"])`:             "vm.recipe: params must be an object of strings",
		`vm.evidence.save("a.png", {})`:     "vm.evidence.save: shot.image must be a string, not undefined",
		`vm.screen.waitWindow("x", {g: 1})`: "vm.screen.waitWindow: unknown option g (known: gone, timeout, user)",
	} {
		h := newFakeHost()
		_, err := runWith(t, mustLoad(t, script(js+";")), h)
		if err == nil {
			t.Fatalf("%s: no error", js)
		}
		contains(t, err.Error(), want)
		if n := len(h.recorded()); n != 0 {
			t.Fatalf("%s made %d host calls", js, n)
		}
	}
}

// TestEveryRegisteredCallHasAVerb calls the verb of every entry of the
// host call registry with all its arguments and options, and checks the
// call it makes, argument for argument, in the order the host's argument
// type declares them.
func TestEveryRegisteredCallHasAVerb(t *testing.T) {
	// sample answers a JS argument and the JSON the verb should send for it.
	sample := func(check string, field reflect.Type) (js, sent string) {
		switch {
		case check == string(calls.ArgText):
			return `42`, `"42"`
		case check == string(calls.ArgStrings):
			return `{k: "v"}`, `{"k":"v"}`
		case check == string(calls.ArgShot):
			return `{image: "shot-1"}`, `"shot-1"`
		case field.Kind() == reflect.Bool:
			return `true`, `true`
		case field.Kind() == reflect.String:
			return `"s"`, `"s"`
		default:
			return `2`, `2`
		}
	}
	fieldOf := func(c calls.Call, name string) reflect.Type {
		args := reflect.TypeOf(c.Args)
		for i := range args.NumField() {
			if tag, _, _ := strings.Cut(args.Field(i).Tag.Get("json"), ","); tag == name {
				return args.Field(i).Type
			}
		}
		t.Fatalf("%s: no field %s", c.Name, name)
		return nil
	}
	// An answer every shaper can read.
	answer := `{"ok":true,"found":true,"stdout":"","seconds":1,"base64":"","path":"p","text":{}}`
	for _, c := range calls.Registry {
		var jsArgs, sent []string
		for _, p := range c.Params {
			field := cmp.Or(p.Field, p.Name)
			check := string(p.JS)
			js, s := sample(check, fieldOf(c, field))
			jsArgs = append(jsArgs, js)
			sent = append(sent, `"`+field+`":`+s)
		}
		if len(c.Options) > 0 {
			var opts []string
			for _, o := range c.Options {
				js, s := sample("", fieldOf(c, o.Name))
				opts = append(opts, o.Name+": "+js)
				sent = append(sent, `"`+o.Name+`":`+s)
			}
			jsArgs = append(jsArgs, "{"+strings.Join(opts, ", ")+"}")
		}
		expr := "vm." + c.Name + "(" + strings.Join(jsArgs, ", ") + ")"
		h := newFakeHost()
		h.answers[c.Name] = answer
		if _, err := runWith(t, mustLoad(t, script(expr+";")), h); err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		want := "{" + strings.Join(sent, ",") + "}"
		if got := h.recorded(); len(got) != 1 || got[0].Name != c.Name || got[0].Args != want {
			t.Errorf("%s made %+v, want one %s %s", expr, got, c.Name, want)
		}
	}
}
