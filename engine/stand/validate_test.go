package stand

import (
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/poligon/poligon/recipes"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/js"
	"github.com/poligon/poligon/scripts"
)

var (
	shippedOnce sync.Once
	shipped     map[string]runtime.Manifest
	shippedErr  error
)

// shippedScripts are the manifests of the scripts and recipes poligon
// ships, loaded by the real JS loader (so MaxSleep and Recipes are real).
func shippedScripts(t testing.TB) map[string]runtime.Manifest {
	t.Helper()
	shippedOnce.Do(func() {
		shipped = map[string]runtime.Manifest{}
		for _, fsys := range []fs.FS{scripts.FS, recipes.FS} {
			shippedErr = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(path, ".js") {
					return err
				}
				src, err := fs.ReadFile(fsys, path)
				if err != nil {
					return err
				}
				m, err := js.Load(path, src, js.Options{})
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				shipped[m.Manifest().Name] = m.Manifest()
				return nil
			})
			if shippedErr != nil {
				return
			}
		}
	})
	if shippedErr != nil {
		t.Fatal(shippedErr)
	}
	return shipped
}

// standEnv is the live world the tests validate against: the shipped
// scripts, two made-up recipes that sleep too long (one directly, one
// through another), and a template list with near-duplicates and a hidden one.
func standEnv(t testing.TB) Env {
	t.Helper()
	s := map[string]runtime.Manifest{}
	for name, m := range shippedScripts(t) {
		s[name] = m
	}
	s["slowpoke"] = runtime.Manifest{Name: "slowpoke", Description: "sleeps", MaxSleep: 601}
	s["wrapper"] = runtime.Manifest{Name: "wrapper", Description: "calls slowpoke",
		Recipes: []runtime.RecipeCall{{Name: "wrapper"}, {Name: "slowpoke"}}}
	return Env{
		Templates: []string{
			"p11-server-11.1-x86-64-legacy-ext4-textmode-server",
			"kworkstation-11.4-x86_64-gnome",
			"kworkstation-10.2-x86_64",
			"tiny",
			"tiny-base-not-for-clone",
			"golden-not-for-clone",
		},
		Scripts: s,
		Owner:   "alice",
	}
}

// plan builds a plan's JSON from machines written as JSON.
func planJSON(name string, machines ...string) string {
	return fmt.Sprintf(`{"name": %q, "machines": [%s]}`, name, strings.Join(machines, ", "))
}

func machineJSON(role, template string, steps ...string) string {
	return fmt.Sprintf(`{"role": %q, "template": %q, "steps": [%s]}`, role, template, strings.Join(steps, ", "))
}

func TestValidateRules(t *testing.T) {
	tiny := func(role string, steps ...string) string { return machineJSON(role, "tiny", steps...) }
	ok := `{"exec": "true"}`
	for _, c := range []struct {
		name string
		plan string
		env  func(*Env)
		want []string // Problem.String() of every problem, in order
	}{
		{"not JSON", `{"name": "x",`, nil,
			[]string{"the plan is not JSON: unexpected end of JSON input (at byte 13)"}},
		{"not an object", `["x"]`, nil,
			[]string{"the plan must be a JSON object {name, machines, notes}, not an array"}},
		{"unknown top-level key", `{"name": "x", "machine": []}`, nil,
			[]string{`unknown key "machine" in the plan (known: name, machines, notes)`}},
		{"unknown machine key", planJSON("x", `{"role": "a", "template": "tiny", "step": []}`), nil,
			[]string{`machine a: unknown key "step" in a machine (known: role, template, steps)`}},
		{"a step with two keys", planJSON("x", tiny("a", ok, `{"exec": "ls", "timeout": 5}`)), nil,
			[]string{`machine a, step 2: a step must be an object with exactly one key, the step kind (like {"exec": "uname -a"}); this one has 2 (exec, timeout): put each in its own step, and options inside the kind's object`}},
		{"bad stand name", planJSON("my-stand", tiny("a")), nil,
			[]string{`stand name "my-stand" must match ^[a-z][a-z0-9]*$: lowercase letters and digits only, no dashes or underscores (it becomes part of every VM name, <owner>-repro-<stand>-<role>)`}},
		{"no machines", planJSON("x"), nil,
			[]string{"the stand has no machines: give at least 1 (machines: [{role, template, steps}])"}},
		{"5 machines", planJSON("x", tiny("a"), tiny("b"), tiny("c"), tiny("d"), tiny("e")), nil,
			[]string{"5 machines: a stand has at most 4"}},
		{"3 machines over a limit of 2", planJSON("x", tiny("a"), tiny("b"), tiny("c")), func(e *Env) { e.MaxMachines = 2 },
			[]string{"3 machines: a stand has at most 2"}},
		{"a role with a dash", planJSON("x", tiny("web-1")), nil,
			[]string{`machine #1: role "web-1" must match ^[a-z][a-z0-9]*$: lowercase letters and digits only, no dashes or underscores (it becomes part of the VM name)`}},
		{"no role", planJSON("x", tiny("")), nil,
			[]string{"machine #1: role is missing: name the machine's part in the stand, like server or ws"}},
		{"duplicate role", planJSON("x", tiny("a"), tiny("a")), nil,
			[]string{"machine #2: role a is machine 1's already: roles must be unique"}},
		{"name too long", planJSON("averyveryverylongstandnamethatgoesonandon", tiny("databaseserver")), nil,
			[]string{"machine databaseserver: the VM name alice-repro-averyveryverylongstandnamethatgoesonandon-databaseserver is 68 characters, over the limit of 63 (a DNS label): shorten the stand name or the role"}},
		{"template matching two", planJSON("x", machineJSON("a", "kworkstation")), nil,
			[]string{`machine a: template "kworkstation" matches 2 templates (kworkstation-10.2-x86_64, kworkstation-11.4-x86_64-gnome): give one exactly`}},
		{"template matching none", planJSON("x", machineJSON("a", "ubuntu")), nil,
			[]string{`machine a: no template matches "ubuntu" (templates: kworkstation-10.2-x86_64, kworkstation-11.4-x86_64-gnome, p11-server-11.1-x86-64-legacy-ext4-textmode-server, tiny)`}},
		{"template missing", planJSON("x", machineJSON("a", "")), nil,
			[]string{`machine a: template is missing (templates: kworkstation-10.2-x86_64, kworkstation-11.4-x86_64-gnome, p11-server-11.1-x86-64-legacy-ext4-textmode-server, tiny)`}},
		{"not-for-clone, exact", planJSON("x", machineJSON("a", "golden-not-for-clone")), nil,
			[]string{"machine a: template golden-not-for-clone is marked not-for-clone and is never cloned: pick another"}},
		{"not-for-clone, the only substring match", planJSON("x", machineJSON("a", "golden")), nil,
			[]string{`machine a: template "golden" matches only golden-not-for-clone, which is marked not-for-clone and is never cloned: pick another`}},
		{"unknown step kind", planJSON("x", tiny("a", `{"run": "ls"}`)), nil,
			[]string{`machine a, step 1: unknown step kind "run" (kinds: exec, exec_gui, expect, wait_boot, sleep, screenshot, click, click_label, drag, type, key, snapshot, rollback, recipe, script)`}},
		{"sleep 601 in the plan", planJSON("x", tiny("a", `{"sleep": 601}`)), nil,
			[]string{"machine a, step 1 (sleep): sleep 601 s is longer than the limit of 600 s: wait for the condition instead (expect with a timeout, wait_boot)"}},
		{"a recipe whose literal sleep is 601", planJSON("x", tiny("a", ok, `{"recipe": {"name": "slowpoke"}}`)), nil,
			[]string{"machine a, step 2 (recipe): recipe slowpoke sleeps 601 s (a literal sleep in recipe slowpoke): no sleep may be longer than 600 s, recipes included"}},
		{"a recipe that calls one that sleeps 601", planJSON("x", tiny("a", `{"recipe": {"name": "wrapper"}}`)), nil,
			[]string{"machine a, step 1 (recipe): recipe wrapper sleeps 601 s (a literal sleep in recipe slowpoke, which wrapper calls): no sleep may be longer than 600 s, recipes included"}},
		{"unknown placeholder", planJSON("x", tiny("a", `{"exec": "echo {{user}} {{vmid}} {{ role }}"}`)), nil,
			[]string{"machine a, step 1 (exec): unknown placeholder {{user}}: a stand's steps know {{vmid}}, {{role}}, {{stand}} and {{ip.<role>}}",
				"machine a, step 1 (exec): unknown placeholder {{ role }}: a stand's steps know {{vmid}}, {{role}}, {{stand}} and {{ip.<role>}}"}},
		{"placeholder in a recipe param", planJSON("x", tiny("a", `{"recipe": {"name": "install", "packages": "{{pkgs}}"}}`)), nil,
			[]string{"machine a, step 1 (recipe): unknown placeholder {{pkgs}}: a stand's steps know {{vmid}}, {{role}}, {{stand}} and {{ip.<role>}}"}},
		{"unknown recipe", planJSON("x", tiny("a", `{"recipe": {"name": "instal", "packages": "nginx"}}`)), nil,
			[]string{`machine a, step 1 (recipe): unknown recipe "instal" (loaded: dataset_app, enable_service, gnome_login, install, lightdm_login, login, slowpoke, update, update_branch, wrapper)`}},
		{"unknown param", planJSON("x", tiny("server", ok, `{"recipe": {"name": "install", "pkgs": "nginx"}}`)), nil,
			[]string{`machine server, step 2 (recipe): unknown param "pkgs" of recipe install (it declares packages)`,
				`machine server, step 2 (recipe): recipe install needs param "packages" (it declares packages)`}},
		{"missing param", planJSON("x", tiny("a", `{"recipe": {"name": "update_branch"}}`)), nil,
			[]string{`machine a, step 1 (recipe): recipe update_branch needs param "branch" (it declares branch)`}},
		{"a recipe param that is not a string", planJSON("x", tiny("a", `{"recipe": {"name": "install", "packages": ["a"]}}`)), nil,
			[]string{`machine a, step 1 (recipe): param packages must be a string, not an array (every recipe param is a string, like "5")`,
				`machine a, step 1 (recipe): recipe install needs param "packages" (it declares packages)`}},
		{"script naming a recipe", planJSON("x", tiny("a", `{"script": {"name": "update"}}`)), nil,
			[]string{`machine a, step 1 (script): update is a recipe (tool: false), not a tool script: call it with {"recipe": {"name": "update", ...}}`}},
		{"unknown script", planJSON("x", tiny("a", `{"script": {"name": "nope"}}`)), nil,
			[]string{`machine a, step 1 (script): unknown script "nope" (tool scripts: dataset_app, gnome_login, install, lightdm_login, login)`}},
		{"script params", planJSON("x", tiny("a", `{"script": {"name": "login", "params": {"sesion": "mate"}}}`)), nil,
			[]string{`machine a, step 1 (script): unknown param "sesion" of script login (it declares user, password, session)`}},
		{"an existing VM", planJSON("web", tiny("a")), func(e *Env) {
			e.Existing = []string{"alice-repro-webapp-a", "alice-repro-web-db", "bob-repro-web-a"}
		}, []string{`stand web exists already: you have alice-repro-web-db; destroy it first (stand_destroy {"stand": "web", "confirm": true}) or pick another name`}},
		{"an existing VM, resuming", planJSON("web", tiny("a")), func(e *Env) {
			e.Existing, e.Resume, e.Building = []string{"alice-repro-web-a"}, true, 2
		}, nil},
		{"a 3rd building stand", planJSON("x", tiny("a")), func(e *Env) { e.Building = 2 },
			[]string{"2 stands are building already (at most 2 at once); wait until one is done (stand_status) or stop one (stand_destroy with force: true)"}},
		{"building under a higher limit", planJSON("x", tiny("a")), func(e *Env) { e.Building, e.MaxBuilding = 2, 3 }, nil},
		{"own address", planJSON("x", tiny("a", `{"exec": "ping -c1 {{ip.a}}"}`)), nil,
			[]string{"machine a, step 1 (exec): {{ip.a}} is this machine's own address: a machine may only use earlier machines' addresses (read its own in the guest: ip -4 -o addr show scope global)"}},
		{"a later machine", planJSON("x", tiny("a", ok, `{"expect": {"command": "ping -c1 {{ip.b}}"}}`), tiny("b")), nil,
			[]string{"machine a, step 2 (expect): {{ip.b}} is the address of machine b, which comes later (machine 2 of 2): a machine may only use the addresses of machines before it, so move b before a"}},
		{"no such machine", planJSON("x", tiny("a"), tiny("b", `{"exec": "ping {{ip.c}}"}`)), nil,
			[]string{"machine b, step 1 (exec): {{ip.c}} names no machine of this stand (roles: a, b)"}},
		{"an ip cycle", planJSON("x", tiny("a", `{"exec": "ping {{ip.b}}"}`), tiny("b", `{"exec": "ping {{ip.a}}"}`)), nil,
			[]string{"machine a, step 1 (exec): machines a and b need each other's address ({{ip.*}}): that is a cycle; order the machines so each uses only earlier ones"}},
		{"a 3-machine cycle", planJSON("x", tiny("a", `{"exec": "ping {{ip.b}}"}`), tiny("b", `{"exec": "ping {{ip.c}}"}`), tiny("c", `{"exec": "ping {{ip.a}}"}`)), nil,
			[]string{"machine a, step 1 (exec): machines a, b and c need each other's addresses ({{ip.*}}: a needs b, b needs c, c needs a): that is a cycle; order the machines so each uses only earlier ones"}},
		{"every problem, not just the first", planJSON("x", tiny("a", `{"sleep": 601}`, `{"key": "Return"}`), machineJSON("b", "nope", `{"click": {"x": -1, "y": 2, "count": 4}}`)), nil,
			[]string{
				"machine a, step 1 (sleep): sleep 601 s is longer than the limit of 600 s: wait for the condition instead (expect with a timeout, wait_boot)",
				`machine a, step 2 (key): "Return" is not a qemu sendkey name: lowercase names joined by "-", like ret, tab, esc, ctrl-alt-f2 (type text with a type step)`,
				`machine b: no template matches "nope" (templates: kworkstation-10.2-x86_64, kworkstation-11.4-x86_64-gnome, p11-server-11.1-x86-64-legacy-ext4-textmode-server, tiny)`,
				"machine b, step 1 (click): x must be a whole number of console pixels ≥ 0, not -1",
				"machine b, step 1 (click): count must be 1, 2 or 3 (clicks), not 4",
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := standEnv(t)
			if c.env != nil {
				c.env(&env)
			}
			r, probs := Check([]byte(c.plan), env)
			var got []string
			for _, p := range probs {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if len(probs) > 0 && !reflect.DeepEqual(r, Resolved{}) {
				t.Fatalf("an invalid plan resolved to %+v", r)
			}
			if len(probs) == 0 && len(r.Machines) == 0 {
				t.Fatal("a valid plan resolved to nothing")
			}
		})
	}
}

// The fields of a Problem, not just its text: the planner and stand_apply
// answer them as JSON.
func TestProblemFields(t *testing.T) {
	_, probs := Check([]byte(planJSON("x", machineJSON("server", "tiny", `{"exec": "true"}`, `{"recipe": {"name": "install", "pkgs": "nginx", "packages": "x"}}`))), standEnv(t))
	want := []Problem{{Machine: "server", Step: 2, Kind: "recipe", Message: `unknown param "pkgs" of recipe install (it declares packages)`}}
	if !reflect.DeepEqual(probs, want) {
		t.Fatalf("problems = %+v, want %+v", probs, want)
	}
	if got := probs[0].String(); got != `machine server, step 2 (recipe): unknown param "pkgs" of recipe install (it declares packages)` {
		t.Fatalf("String() = %s", got)
	}
}

func TestResolved(t *testing.T) {
	plan := planJSON("web",
		machineJSON("db", "tiny", `{"exec": "true"}`),
		machineJSON("server", "p11-server", `{"exec": "echo {{ip.db}} {{ip.db}} {{vmid}} {{role}} {{stand}}"}`, `{"recipe": {"name": "update"}}`),
		machineJSON("ws", "kworkstation-11.4", `{"expect": {"command": "curl http://{{ip.server}}/", "contains": "{{ip.db}}"}}`))
	r, probs := Check([]byte(plan), standEnv(t))
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	wantTemplates := []string{"tiny", "p11-server-11.1-x86-64-legacy-ext4-textmode-server", "kworkstation-11.4-x86_64-gnome"}
	if !reflect.DeepEqual(r.Templates, wantTemplates) {
		t.Fatalf("templates = %q", r.Templates)
	}
	// Needs are in plan order, not in the order the steps name them.
	wantNeeds := [][]string{nil, {"db"}, {"db", "server"}}
	if !reflect.DeepEqual(r.Needs, wantNeeds) {
		t.Fatalf("needs = %q, want %q", r.Needs, wantNeeds)
	}
	if got := r.ScriptTimeouts["update"].Seconds(); got != 3600 {
		t.Fatalf("update's timeout = %v s, want its manifest's 3600", got)
	}
	if r.Name != "web" || len(r.Machines) != 3 {
		t.Fatalf("plan = %+v", r.Plan)
	}
}

func TestVMName(t *testing.T) {
	if got := VMName("alice", "nginxws", "server"); got != "alice-repro-nginxws-server" {
		t.Fatal(got)
	}
	if got := VMName("alice", "nginxws", ""); got != "alice-repro-nginxws-" {
		t.Fatal(got)
	}
}

func TestProblemString(t *testing.T) {
	for p, want := range map[Problem]string{
		{Message: "m"}:                                      "m",
		{Machine: "a", Message: "m"}:                        "machine a: m",
		{Machine: "#2", Step: 3, Message: "m"}:              "machine #2, step 3: m",
		{Machine: "a", Step: 3, Kind: "exec", Message: "m"}: "machine a, step 3 (exec): m",
	} {
		if got := p.String(); got != want {
			t.Errorf("%+v: %q, want %q", p, got, want)
		}
	}
}
