package stand

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/js"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/compile")

// goldenPlans are the plans of testdata/compile, by name.
func goldenPlans(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/compile/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden plans: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = data
	}
	return out
}

func mustResolve(t testing.TB, data []byte) Resolved {
	t.Helper()
	r, probs := Check(data, standEnv(t))
	if len(probs) > 0 {
		t.Fatalf("the plan is not valid: %v", probs)
	}
	return r
}

func TestCompileGolden(t *testing.T) {
	for name, data := range goldenPlans(t) {
		t.Run(name, func(t *testing.T) {
			r := mustResolve(t, data)
			got := Compile(r)
			if again := Compile(mustResolve(t, data)); !bytes.Equal(got, again) {
				t.Fatal("two compiles of the same plan differ")
			}
			golden := filepath.Join("testdata/compile", name+".js")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./engine/stand -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs from the compiler's output (go test ./engine/stand -update rewrites it); got:\n%s", golden, got)
			}
			m := mustLoadStand(t, got)
			checkManifest(t, r, m.Manifest())
		})
	}
}

func mustLoadStand(t testing.TB, src []byte) *js.Module {
	t.Helper()
	m, err := js.Load("stand.js", src, js.Options{})
	if err != nil {
		t.Fatalf("the compiled module does not load: %v\n%s", err, src)
	}
	return m
}

// checkManifest: a recipe named stand_<name>, role required, from "1",
// one ip_<role> param (default "") per role some machine uses.
func checkManifest(t testing.TB, r Resolved, m runtime.Manifest) {
	t.Helper()
	if m.Name != "stand_"+r.Name || m.Tool {
		t.Fatalf("manifest %s tool=%v, want stand_%s tool=false", m.Name, m.Tool, r.Name)
	}
	want := []string{"role", "from"}
	for _, mach := range r.Machines {
		for _, needs := range r.Needs {
			if slices.Contains(needs, mach.Role) {
				want = append(want, "ip_"+mach.Role)
				break
			}
		}
	}
	var got []string
	for _, p := range m.Params {
		got = append(got, p.Name)
		switch {
		case p.Name == "role" && p.Default != nil:
			t.Fatal("role has a default")
		case p.Name == "from" && (p.Default == nil || *p.Default != "1"):
			t.Fatal(`from's default is not "1"`)
		case strings.HasPrefix(p.Name, "ip_") && (p.Default == nil || *p.Default != ""):
			t.Fatalf(`%s's default is not ""`, p.Name)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("params %q, want %q", got, want)
	}
	if m.Timeout.Seconds() < 600 {
		t.Fatalf("timeout %v, want at least 600 s", m.Timeout)
	}
}

// recorder is a Host that answers every call like a healthy machine and
// records "name args" lines.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (h *recorder) Call(_ context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	h.mu.Lock()
	h.calls = append(h.calls, name+" "+string(args))
	h.mu.Unlock()
	switch name {
	case "waitBoot":
		return json.RawMessage(`{"ok": true, "seconds": 3}`), nil
	case "evidence.save":
		return json.RawMessage(`{"path": "/evidence/x.png"}`), nil
	case "expect":
		return json.RawMessage(`{"stdout": "ok"}`), nil
	}
	return json.RawMessage(`{}`), nil
}

// runStand runs a compiled stand for one machine and answers the host calls.
func runStand(t testing.TB, m *js.Module, given map[string]string) ([]string, string, error) {
	t.Helper()
	params, err := m.Manifest().Bind(given)
	if err != nil {
		return nil, "", err
	}
	h := &recorder{}
	res, err := m.Run(context.Background(), runtime.Run{Host: h, Params: params, VMID: 101})
	return h.calls, string(res.Value), err
}

func TestRunCompiled(t *testing.T) {
	plans := goldenPlans(t)
	nginx := mustLoadStand(t, Compile(mustResolve(t, plans["nginxws"])))
	ws := []string{
		`step {"n":1,"of":2,"label":"expect curl -s http://{{ip.server}}/ (contains \"html\")"}`,
		`expect {"command":"curl -s http://10.0.0.5/","timeout":120,"contains":"html"}`,
		`step {"n":2,"of":2,"label":"recipe lightdm_login"}`,
		`recipe {"name":"lightdm_login"}`,
	}
	for _, c := range []struct {
		name   string
		params map[string]string
		calls  []string
		result string
	}{
		{"ws from 1", map[string]string{"role": "ws", "ip_server": "10.0.0.5"}, ws, `"ws: 2 steps"`},
		{"ws from 2 skips step 1", map[string]string{"role": "ws", "from": "2", "ip_server": "10.0.0.5"}, ws[2:], `"ws: 2 steps"`},
		{"ws from 3 has nothing left", map[string]string{"role": "ws", "from": "3"}, nil, `"ws: 2 steps"`},
		{"server", map[string]string{"role": "server"}, []string{
			`step {"n":1,"of":2,"label":"recipe install packages=nginx"}`,
			`recipe {"name":"install","params":{"packages":"nginx"}}`,
			`step {"n":2,"of":2,"label":"recipe enable_service service=nginx"}`,
			`recipe {"name":"enable_service","params":{"service":"nginx"}}`,
		}, `"server: 2 steps"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls, result, err := runStand(t, nginx, c.params)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(calls, c.calls) {
				t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(c.calls, "\n"))
			}
			if result != c.result {
				t.Fatalf("result %s, want %s", result, c.result)
			}
		})
	}
	for _, c := range []struct {
		name   string
		params map[string]string
		err    string
	}{
		{"no address", map[string]string{"role": "ws"}, "stand nginxws: the address of machine server is not known (param ip_server is empty)"},
		{"no such role", map[string]string{"role": "db"}, `stand nginxws has no machine "db" (roles: server, ws)`},
		{"a role that is a builtin's name", map[string]string{"role": "constructor"}, `stand nginxws has no machine "constructor"`},
		{"from past the end", map[string]string{"role": "ws", "from": "4"}, `from must be a step number from 1 to 3, not "4"`},
		{"from not a number", map[string]string{"role": "ws", "from": "two"}, `from must be a step number from 1 to 3, not "two"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls, _, err := runStand(t, nginx, c.params)
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
			if len(calls) > 1 {
				t.Fatalf("it went on after failing: %q", calls)
			}
		})
	}
}

// Every step kind compiles to the host call the manual says, with its
// defaults written out.
func TestRunEveryKind(t *testing.T) {
	m := mustLoadStand(t, Compile(mustResolve(t, goldenPlans(t)["allkinds"])))
	calls, _, err := runStand(t, m, map[string]string{"role": "desk", "ip_base": "10.1.1.1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		if !strings.HasPrefix(c, "step ") {
			got = append(got, c)
		}
	}
	want := []string{
		`exec {"command":"uname -a","timeout":120}`,
		`exec {"command":"ping -c1 10.1.1.1","timeout":15}`,
		`execGui {"command":"kcalc","user":"test"}`,
		`execGui {"command":"xterm -T vm101","user":"admin"}`,
		`expect {"command":"pgrep kcalc","timeout":120}`,
		`expect {"command":"cat /etc/hostname","timeout":5.5,"contains":"desk"}`,
		`waitBoot {"timeout":90}`,
		`sleep {"seconds":2.5}`,
		`screen.shot {}`,
		`evidence.save {"path":"shots/allkinds-desk-101.png"}`,
		`mouse.click {"x":10,"y":20,"button":"left","count":1}`,
		`mouse.click {"x":100,"y":200,"button":"right","count":2}`,
		`mouse.clickLabel {"label":"OK","button":"left","count":1}`,
		`mouse.clickLabel {"label":"Trash","kind":"icon","button":"middle","count":3}`,
		`mouse.drag {"x1":1,"y1":2,"x2":300,"y2":400}`,
		`keyboard.type {"text":"hello world\n"}`,
		`keyboard.press {"key":"ctrl-alt-f2"}`,
		`power.snapshot {"name":"before-desk"}`,
		`power.rollback {"name":"before-desk"}`,
		`recipe {"name":"update"}`,
		`recipe {"name":"login","params":{"user":"test","session":"plasma"}}`,
		`recipe {"name":"install","params":{"packages":"kcalc"}}`,
		`recipe {"name":"gnome_login"}`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(calls) != 2*len(want) || !strings.HasPrefix(calls[0], `step {"n":1,"of":23,`) {
		t.Fatalf("each step is not announced first: %q", calls[:2])
	}
	// wait_boot throws when the agent does not answer.
	r := mustResolve(t, []byte(planJSON("wb", machineJSON("a", "tiny", `{"wait_boot": 5}`, `{"exec": "true"}`))))
	wb := mustLoadStand(t, Compile(r))
	params, _ := wb.Manifest().Bind(map[string]string{"role": "a"})
	silent := runtime.HostFunc(func(_ context.Context, name string, _ json.RawMessage) (json.RawMessage, error) {
		if name == "exec" {
			t.Fatal("exec ran after wait_boot failed")
		}
		return json.RawMessage(`{"ok": false}`), nil
	})
	_, err = wb.Run(context.Background(), runtime.Run{Host: silent, Params: params})
	if err == nil || !strings.Contains(err.Error(), "the guest agent did not answer within 5 s") {
		t.Fatalf("wait_boot error: %v", err)
	}
}

// Plan text reaches the host exactly as written, whatever it holds, and a
// secret param's value is never in a label.
func TestRunNastyStrings(t *testing.T) {
	data := goldenPlans(t)["nasty"]
	r := mustResolve(t, data)
	m := mustLoadStand(t, Compile(r))
	for i, mach := range r.Machines {
		calls, _, err := runStand(t, m, map[string]string{"role": mach.Role, "ip_server": "10.9.9.9"})
		if err != nil {
			t.Fatalf("%s: %v", mach.Role, err)
		}
		checkRendered(t, r, i, calls, map[string]string{"server": "10.9.9.9"})
		for _, c := range calls {
			if strings.HasPrefix(c, "step ") && (strings.Contains(c, "s3cr") || strings.Contains(c, "hunter2")) {
				t.Fatalf("a secret is in a label: %s", c)
			}
		}
	}
}

// checkRendered checks a machine's run against its plan: one step call per
// step, numbered, and the exec/type text of each step as the host got it
// equal to the plan's with its placeholders filled in.
func checkRendered(t testing.TB, r Resolved, i int, calls []string, ips map[string]string) {
	t.Helper()
	mach := r.Machines[i]
	pairs := []string{"{{vmid}}", "101", "{{role}}", mach.Role, "{{stand}}", r.Name}
	for role, addr := range ips {
		pairs = append(pairs, "{{ip."+role+"}}", addr)
	}
	fill := strings.NewReplacer(pairs...)
	steps := 0
	for k, c := range calls {
		name, args, _ := strings.Cut(c, " ")
		if name != "step" {
			continue
		}
		var st struct{ N, Of int }
		if err := json.Unmarshal([]byte(args), &st); err != nil {
			t.Fatal(err)
		}
		steps++
		if st.N != steps || st.Of != len(mach.Steps) {
			t.Fatalf("step call %s, want step %d of %d", args, steps, len(mach.Steps))
		}
		s := mach.Steps[st.N-1]
		if s.Kind != "exec" && s.Kind != "type" {
			continue
		}
		a, _ := kinds[slices.IndexFunc(kinds, func(k kind) bool { return k.Name == s.Kind })].parse(s.Arg)
		want := fill.Replace(a.command + a.text)
		if k+1 >= len(calls) {
			t.Fatalf("step %d made no call", st.N)
		}
		_, next, _ := strings.Cut(calls[k+1], " ")
		var got struct{ Command, Text string }
		if err := json.Unmarshal([]byte(next), &got); err != nil {
			t.Fatal(err)
		}
		if got.Command+got.Text != want {
			t.Fatalf("step %d sent %q, want %q", st.N, got.Command+got.Text, want)
		}
	}
	if steps != len(mach.Steps) {
		t.Fatalf("%d step calls for %d steps", steps, len(mach.Steps))
	}
}

func TestCompileTimeout(t *testing.T) {
	for plan, want := range map[string]float64{
		planJSON("a", machineJSON("a", "tiny", `{"exec": "true"}`)):                                   600,
		planJSON("a", machineJSON("a", "tiny", `{"recipe": {"name": "update"}}`, `{"exec": "true"}`)): 3600 + 120,
		planJSON("a", machineJSON("a", "tiny", `{"sleep": 600}`, `{"wait_boot": 300}`), machineJSON("b", "tiny", `{"expect": {"command": "x", "timeout": 3600}}`, `{"recipe": {"name": "install", "packages": "x"}}`, `{"key": "ret"}`)): 600 + 300 + 3600 + 600 + 60,
	} {
		m := mustLoadStand(t, Compile(mustResolve(t, []byte(plan))))
		if got := m.Manifest().Timeout.Seconds(); got != want {
			t.Errorf("%s: timeout %v, want %v", plan, got, want)
		}
	}
}

func FuzzCheck(f *testing.F) {
	for _, data := range goldenPlans(f) {
		f.Add(data)
	}
	f.Add([]byte(`{"name": "a", "machines": [{"role": "a", "template": "tiny", "steps": [{"exec": "x{{vmid}}y"}, {"type": "\u0060${"}]}]}`))
	f.Add([]byte(`{"name": "a", "machines": [{"role": "a", "template": "tiny", "steps": [{"recipe": {"name": "install", "packages": "{{role}}$"}}]}, {"role": "b", "template": "tiny", "steps": [{"exec": "{{ip.a}}\\"}]}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"name": 1}`))
	env := standEnv(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, probs := Check(data, env)
		for _, p := range probs {
			if p.Message == "" {
				t.Fatalf("a problem without a message: %+v", p)
			}
		}
		if len(probs) > 0 {
			return
		}
		src := Compile(r)
		m, err := js.Load("stand.js", src, js.Options{})
		if err != nil {
			t.Fatalf("the compiled module does not load: %v\n%s", err, src)
		}
		ips := map[string]string{}
		given := map[string]string{}
		for _, mach := range r.Machines {
			ips[mach.Role] = "10.0.0." + mach.Role
			given["ip_"+mach.Role] = ips[mach.Role]
		}
		for i, mach := range r.Machines {
			run := map[string]string{"role": mach.Role}
			for _, p := range m.Manifest().Params {
				if v, ok := given[p.Name]; ok {
					run[p.Name] = v
				}
			}
			calls, _, err := runStand(t, m, run)
			if err != nil {
				t.Fatalf("%s: %v\n%s", mach.Role, err, src)
			}
			checkRendered(t, r, i, calls, ips)
		}
	})
}

// A 4-machine plan of 20 steps each.
func BenchmarkCompile(b *testing.B) {
	var machines []string
	for i, role := range []string{"db", "server", "ws", "client"} {
		var steps []string
		for j := 0; j < 20; j++ {
			steps = append(steps, fmt.Sprintf(`{"exec": "echo step %d on {{role}} > /tmp/log"}`, j),
				fmt.Sprintf(`{"recipe": {"name": "install", "packages": "pkg%d"}}`, j))
			if i > 0 {
				steps = append(steps, `{"expect": {"command": "ping -c1 {{ip.db}}", "contains": "1 received"}}`)
			}
		}
		machines = append(machines, machineJSON(role, "tiny", steps[:20]...))
	}
	r := mustResolve(b, []byte(planJSON("bench", machines...)))
	b.ReportAllocs()
	for b.Loop() {
		Compile(r)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
}

// Check and Compile together, as stand_apply does them.
func BenchmarkCheckCompile(b *testing.B) {
	data := goldenPlans(b)["allkinds"]
	env := standEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		r, probs := Check(data, env)
		if len(probs) > 0 {
			b.Fatal(probs)
		}
		Compile(r)
	}
}

// Compile is safe even on a plan Validate never saw: no name, role or
// param name can write code, and a bad step throws when it runs.
func TestCompileUnvalidated(t *testing.T) {
	r := Resolved{Plan: Plan{Name: "x\"; throw 1; //\n", Machines: []Machine{{Role: "a"}}}}
	if _, err := js.Load("stand.js", Compile(r), js.Options{}); err == nil || !strings.Contains(err.Error(), "manifest: name") {
		t.Fatalf("a stand with a bad name: %v, want only its manifest name refused", err)
	}
	r = Resolved{Plan: Plan{Name: "x", Machines: []Machine{
		{Role: "__proto__", Template: "t\n*/ throw 2;", Steps: []Step{
			{Kind: "recipe", Arg: json.RawMessage(`{"name": "a\"b", "__proto__": "v", "x-y": "{{vmid}}"}`)},
			{Kind: "exec", Arg: json.RawMessage(`{"command": 5}`)},
			{Kind: "nope", Arg: json.RawMessage(`1`)},
		}},
	}}}
	m := mustLoadStand(t, Compile(r))
	calls, _, err := runStand(t, m, map[string]string{"role": "__proto__"})
	if err == nil || !strings.Contains(err.Error(), "this step is not valid: exec: command must be a string, not a number") {
		t.Fatalf("error %v", err)
	}
	want := []string{
		`step {"n":1,"of":3,"label":"recipe a\"b __proto__=v x-y={{vmid}}"}`,
		`recipe {"name":"a\"b","params":{"__proto__":"v","x-y":"101"}}`,
		`step {"n":2,"of":3,"label":"exec "}`,
	}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
}

// The audit log and the traces keep a plan with its secrets by size: a
// password in a command, typed text, a secret-named param, the notes.
func TestRedactedPlan(t *testing.T) {
	plan := `{"name": "web", "notes": "root pw is hunter2", "machines": [{"role": "db", "template": "tiny", "steps": [
		{"exec": "echo root:hunter2 | chpasswd"},
		{"type": "hunter2\n"},
		{"recipe": {"name": "login", "user": "ann", "password": "hunter2"}},
		{"script": {"name": "login", "params": {"user": "ann", "password": "hunter2"}}},
		{"exec": "hostname"}]}]}`
	for _, raw := range []string{plan, strconv.Quote(plan)} {
		out, _ := json.Marshal(Redacted([]byte(raw)))
		if strings.Contains(string(out), "hunter2") {
			t.Fatalf("a secret survived: %s", out)
		}
		for _, want := range []string{`"name":"web"`, `"role":"db"`, `chpasswd`, `exec hostname`, `recipe login user=`, `script login user=`} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s lacks %s", out, want)
			}
		}
	}
	if out, _ := json.Marshal(Redacted([]byte(`{"name": "x", "machines": [hunter2`))); strings.Contains(string(out), "hunter2") {
		t.Fatalf("a plan that does not decode is kept: %s", out)
	}
}
