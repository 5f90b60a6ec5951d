package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/backends/vision/visiontest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/internal/store"
	"github.com/poligon/poligon/internal/testvm"
	"github.com/poligon/poligon/internal/trace"
)

// standView reads stand_status of one stand.
func standView(t *testing.T, cs *mcp.ClientSession, name string) stand.View {
	t.Helper()
	out := mustOK(t, cs, "stand_status", map[string]any{"stand": name})
	var v stand.View
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("stand_status: %v\n%s", err, out)
	}
	return v
}

// waitStand polls stand_status until until says so, failing the test after
// the hang guard.
func waitStand(t *testing.T, cs *mcp.ClientSession, name string, until func(stand.View) bool) stand.View {
	t.Helper()
	deadline := time.Now().Add(backendtest.HangGuard)
	for {
		v := standView(t, cs, name)
		if until(v) {
			return v
		}
		if time.Now().After(deadline) {
			raw, _ := json.MarshalIndent(v, "", "  ")
			t.Fatalf("stand %s: condition not met after %s:\n%s", name, backendtest.HangGuard, raw)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func stopped(v stand.View) bool { return v.Status != store.StandRunning }

func machineOf(t *testing.T, v stand.View, role string) stand.MachineView {
	t.Helper()
	for _, m := range v.Machines {
		if m.Role == role {
			return m
		}
	}
	t.Fatalf("stand %s has no machine %s", v.Stand, role)
	return stand.MachineView{}
}

// myVMs answers the caller's VM names by vmid.
func myVMs(t *testing.T, s *Server) map[int]string {
	t.Helper()
	who := localWho(t, s)
	vms, err := who.MyVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, vm := range vms {
		out[vm.VMID] = vm.Name
	}
	return out
}

func phase(t *testing.T, s *Server, stand, role string, name store.MachineStatus) store.StandPhase {
	t.Helper()
	st, ok, err := s.app.Store.StandOf(context.Background(), s.cfg.DefaultBench, "tester", stand)
	if err != nil || !ok {
		t.Fatalf("stand %s: %v %v", stand, ok, err)
	}
	for _, m := range st.Machines {
		if m.Role != role {
			continue
		}
		for _, p := range m.Phases {
			if p.Name == name {
				return p
			}
		}
	}
	t.Fatalf("stand %s machine %s has no phase %s", stand, role, name)
	return store.StandPhase{}
}

// TestStandOnTiny builds a three-machine stand on the local backend: a
// server with busybox httpd, a client that fetches its page by the
// server's address over the stand network, and an independent machine that
// builds beside them. Then it destroys the stand.
func TestStandOnTiny(t *testing.T) {
	cfg := testConfig(t, testvm.DataDir(t))
	s, logged := loggedServer(t, cfg)
	cs := connect(t, s)
	plan := map[string]any{
		"name": "web",
		"machines": []any{
			map[string]any{"role": "server", "template": "tiny", "steps": []any{
				map[string]any{"exec": "mkdir -p /www && echo hello from {{role}} of {{stand}} > /www/index.html"},
				map[string]any{"expect": map[string]any{"command": "busybox httpd -p 80 -h /www && echo started", "contains": "started"}},
			}},
			map[string]any{"role": "client", "template": "tiny", "steps": []any{
				map[string]any{"expect": map[string]any{"command": "wget -qO- http://{{ip.server}}/", "contains": "hello from server of web", "timeout": 30}},
			}},
			map[string]any{"role": "solo", "template": "tiny", "steps": []any{
				map[string]any{"exec": "echo {{vmid}} > /root/vmid && PGPASSWORD=hunter2 true"},
			}},
		},
	}
	out := mustOK(t, cs, "stand_apply", map[string]any{"plan": plan})
	if !strings.Contains(out, `"status": "running"`) {
		t.Fatalf("stand_apply = %s", out)
	}
	v := waitStand(t, cs, "web", stopped)
	raw, _ := json.MarshalIndent(v, "", "  ")
	if v.Status != store.StandDone {
		t.Fatalf("stand web ended %s:\n%s", v.Status, raw)
	}
	// The background build keeps the req of the stand_apply that started
	// it: its own lines, each machine's, the steps' script runs and the
	// backend's requests.
	lines := logLines(t, logged.String())
	req := toolLine(t, lines, "stand_apply")["req"]
	for msg, n := range map[string]int{"stand build started": 1, "stand build ended": 1, "stand machine done": 3, "script finished": 3, "starting vm": 3} {
		if got := len(withReq(lines, msg, req)); got != n {
			t.Errorf("%d %q lines with req=%s, want %d", got, msg, req, n)
		}
	}
	if len(withReq(lines, "qemu: guest agent request", req)) == 0 {
		t.Errorf("no guest agent request line with req=%s", req)
	}
	server, client, solo := machineOf(t, v, "server"), machineOf(t, v, "client"), machineOf(t, v, "solo")
	vms := myVMs(t, s)
	for _, m := range []stand.MachineView{server, client, solo} {
		if want := "tester-repro-web-" + m.Role; vms[m.VMID] != want {
			t.Errorf("machine %s is vmid %d named %q, want %s", m.Role, m.VMID, vms[m.VMID], want)
		}
		if m.IP == "" || !m.Done {
			t.Errorf("machine %s: ip %q done %v", m.Role, m.IP, m.Done)
		}
		who := localWho(t, s)
		vm, release, err := who.LockVM(context.Background(), m.VMID)
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := vm.Snapshots(context.Background())
		release()
		if err != nil || !contains(snaps, "clean") {
			t.Errorf("machine %s snapshots %v, %v: want clean", m.Role, snaps, err)
		}
	}
	if server.IP == client.IP || server.IP == solo.IP {
		t.Fatalf("machines share an address: %s %s %s", server.IP, client.IP, solo.IP)
	}
	if !strings.Contains(client.Steps[0].Label, "wget -qO- http://{{ip.server}}/") {
		t.Errorf("a label shows the plan as written: %q", client.Steps[0].Label)
	}
	// Independent machines build at once: the server's and solo's builds
	// overlap, and the client's clone and boot overlap the server's build,
	// while its steps start only once the server is done.
	sv, so := phase(t, s, "web", "server", "booting"), phase(t, s, "web", "solo", "booting")
	if !(sv.Started.Before(so.Ended) && so.Started.Before(sv.Ended)) {
		t.Errorf("server and solo booted one after the other: server %v-%v, solo %v-%v", sv.Started, sv.Ended, so.Started, so.Ended)
	}
	if cb := phase(t, s, "web", "client", "booting"); !cb.Started.Before(*server.Ended) {
		t.Errorf("the client's boot waited for the server: it started %v, the server ended %v", cb.Started, server.Ended)
	}
	if !client.Steps[0].Started.After(*server.Ended) {
		t.Errorf("the client's step started %v, before the server was done %v", client.Steps[0].Started, server.Ended)
	}

	// The build is a trace: each machine's phases, and its steps' host
	// calls, all named with the stand.
	var steps []trace.Step
	eventually(t, "the stand's trace", func() bool {
		steps, _ = s.app.TraceSteps(context.Background(), localWho(t, s), cfg.DefaultBench, trace.Query{Stand: "web"})
		phases, calls := 0, 0
		for _, st := range steps {
			switch {
			case st.Call == "stand.cloning" && st.Source == trace.SourceStand:
				phases++
			case st.Call == "expect" && st.Source == trace.SourceStand && st.VM == "tester-repro-web-client":
				calls++
			}
		}
		return phases == 3 && calls == 1
	})
	for _, st := range steps {
		if raw, _ := json.Marshal(st); strings.Contains(string(raw), "hunter2") {
			t.Errorf("a trace step keeps the password a command carries: %s", raw)
		}
	}

	// A second apply of the same name is refused while its VMs exist.
	mustRefuse(t, cs, "stand_apply", map[string]any{"plan": plan}, "tester-repro-web-")
	list := mustOK(t, cs, "stand_status", nil)
	if !strings.Contains(list, `"stand": "web"`) || !strings.Contains(list, `"done": 3`) {
		t.Errorf("stand_status list = %s", list)
	}

	mustRefuse(t, cs, "stand_destroy", map[string]any{"stand": "web", "confirm": false}, "confirm=true")
	out = mustOK(t, cs, "stand_destroy", map[string]any{"stand": "web", "confirm": true})
	var d struct {
		OK        bool
		Destroyed []int
	}
	json.Unmarshal([]byte(out), &d)
	if !d.OK || len(d.Destroyed) != 3 {
		t.Fatalf("stand_destroy = %s", out)
	}
	for id, name := range myVMs(t, s) {
		if strings.HasPrefix(name, "tester-repro-web-") {
			t.Errorf("vmid %d %s survived the destroy", id, name)
		}
	}
	mustRefuse(t, cs, "stand_status", map[string]any{"stand": "web"}, "no stand web")
}

// TestStandInterruptResumeAndForce: a server stops while a stand builds;
// the next one sees it interrupted, and resume finishes it on the same VM
// without running its finished step again. Then a build is destroyed with
// force while it runs.
func TestStandInterruptResumeAndForce(t *testing.T) {
	cfg := testConfig(t, testvm.DataDir(t))
	a, csA := newServer(t, cfg)
	plan := `{"name": "rs", "machines": [{"role": "m", "template": "tiny", "steps": [
		{"exec": "echo once >> /root/count"},
		{"exec": "sleep 4"},
		{"expect": {"command": "wc -l < /root/count", "contains": "1"}}]}]}`
	mustOK(t, csA, "stand_apply", map[string]any{"plan": json.RawMessage(plan)})
	v := waitStand(t, csA, "rs", func(v stand.View) bool { return v.Machines[0].Steps[1].Status == "running" || stopped(v) })
	vmid := v.Machines[0].VMID
	a.app.Close() // the "restart": its build is interrupted mid-step

	b, csB := newServer(t, cfg)
	v = standView(t, csB, "rs")
	if v.Status != store.StandInterrupted || v.Machines[0].Steps[0].Status != "done" || v.Machines[0].Status != "interrupted" {
		raw, _ := json.MarshalIndent(v, "", "  ")
		t.Fatalf("after the restart:\n%s", raw)
	}
	mustRefuse(t, csB, "stand_apply", map[string]any{"plan": json.RawMessage(plan)}, "interrupted")
	// A resume counts the record's progress: a plan with other steps is
	// refused, and the refusal changes nothing.
	changed := strings.Replace(plan, "sleep 4", "sleep 5", 1)
	mustRefuse(t, csB, "stand_apply", map[string]any{"stand": "rs", "resume": true, "plan": json.RawMessage(changed)}, "changed the stand's machines")
	if v := standView(t, csB, "rs"); v.Status != store.StandInterrupted {
		t.Fatalf("after a refused resume the stand is %s", v.Status)
	}
	mustOK(t, csB, "stand_apply", map[string]any{"stand": "rs", "resume": true})
	v = waitStand(t, csB, "rs", stopped)
	if v.Status != store.StandDone || v.Machines[0].VMID != vmid {
		raw, _ := json.MarshalIndent(v, "", "  ")
		t.Fatalf("resumed stand (vmid was %d):\n%s", vmid, raw)
	}
	n := 0
	for _, name := range myVMs(t, b) {
		if strings.HasPrefix(name, "tester-repro-rs-") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d VMs of stand rs after the resume, want 1", n)
	}
	mustOK(t, csB, "stand_destroy", map[string]any{"stand": "rs", "confirm": true})

	// Destroy while building: refused without force; with force the build
	// stops and its VM goes.
	mustOK(t, csB, "stand_apply", map[string]any{"plan": json.RawMessage(`{"name": "fd", "machines": [
		{"role": "m", "template": "tiny", "steps": [{"exec": "sleep 300"}]}]}`)})
	v = waitStand(t, csB, "fd", func(v stand.View) bool { return v.Machines[0].Steps[0].Status == "running" || stopped(v) })
	mustRefuse(t, csB, "stand_destroy", map[string]any{"stand": "fd", "confirm": true}, "still building")
	out := mustOK(t, csB, "stand_destroy", map[string]any{"stand": "fd", "confirm": true, "force": true})
	if !strings.Contains(out, fmt.Sprint(v.Machines[0].VMID)) {
		t.Fatalf("force destroy = %s", out)
	}
	for id, name := range myVMs(t, b) {
		if strings.HasPrefix(name, "tester-repro-fd-") {
			t.Errorf("vmid %d %s survived", id, name)
		}
	}
}

// Bad plans are refused before anything is cloned, each naming its fault.
func TestStandApplyRefusals(t *testing.T) {
	cfg := testConfig(t, testvm.DataDir(t))
	s, cs := newServer(t, cfg)
	machine := func(role string, steps ...any) map[string]any {
		if steps == nil {
			steps = []any{}
		}
		return map[string]any{"role": role, "template": "tiny", "steps": steps}
	}
	five := []any{}
	for i := range 5 {
		five = append(five, machine(fmt.Sprintf("m%d", i)))
	}
	for _, tc := range []struct {
		name string
		plan any
		want string
	}{
		{"not JSON", "{name: web", "not JSON"},
		{"five machines", map[string]any{"name": "big", "machines": five}, "at most 4"},
		{"a role with a dash", map[string]any{"name": "web", "machines": []any{machine("web-server")}}, "web-server"},
		{"a cycle", map[string]any{"name": "cyc", "machines": []any{
			machine("a", map[string]any{"exec": "ping {{ip.b}}"}), machine("b", map[string]any{"exec": "ping {{ip.a}}"})}}, "cycle"},
		{"a long sleep", map[string]any{"name": "slow", "machines": []any{machine("a", map[string]any{"sleep": 601})}}, "600"},
		{"an unknown recipe", map[string]any{"name": "rec", "machines": []any{machine("a", map[string]any{"recipe": map[string]any{"name": "nosuch"}})}}, "nosuch"},
		{"a template nobody has", map[string]any{"name": "tpl", "machines": []any{map[string]any{"role": "a", "template": "windows", "steps": []any{}}}}, "windows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := mustRefuse(t, cs, "stand_apply", map[string]any{"plan": tc.plan}, tc.want)
			if !strings.Contains(out, "hint:") {
				t.Errorf("no hint: %s", out)
			}
		})
	}
	// A third concurrent stand: two are building (recorded by a live
	// builder: one this test holds present).
	release, err := s.app.Store.Hold("test-builder")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for _, name := range []string{"one", "two"} {
		if err := s.app.Store.CreateStand(context.Background(), store.Stand{Bench: cfg.DefaultBench, Owner: "tester", Name: name, Builder: "test-builder"}, 2, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	mustRefuse(t, cs, "stand_apply", map[string]any{"plan": map[string]any{"name": "three", "machines": []any{machine("a")}}}, "building")
	if vms := myVMs(t, s); len(vms) != 0 {
		t.Fatalf("a refused apply cloned %v", vms)
	}
}

// stand_plan through the tool: the live template list and the loaded
// recipes reach the model's prompt, and the plan it answers compiles for
// this caller. The model is visiontest, an OpenAI-compatible fake.
func TestStandPlanTool(t *testing.T) {
	model := visiontest.New()
	t.Cleanup(model.Close)
	cfg := testConfig(t, testvm.DataDir(t))
	cfg.Planner = config.Planner{API: model.ChatURL(), Model: "planner-test", Key: "plan-key-0123456789"}
	s, cs := newServer(t, cfg)
	plan := `{"name": "web", "machines": [{"role": "server", "template": "tin", "steps": [{"recipe": {"name": "install", "packages": "nginx"}}]}]}`
	model.Reply(visiontest.Reply{Content: "<think>tiny it is</think>\n```json\n" + plan + "\n```", Usage: &visiontest.Usage{Prompt: 900, Completion: 40}})
	out := mustOK(t, cs, "stand_plan", map[string]any{"goal": "a web server"})
	var ans struct {
		OK, Valid        bool
		Plan             json.RawMessage
		Attempts         int
		Model            string
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
	if err := json.Unmarshal([]byte(out), &ans); err != nil || !ans.OK || !ans.Valid || ans.Attempts != 1 || ans.Model != "planner-test" || ans.PromptTokens != 900 {
		t.Fatalf("stand_plan = %s (%v)", out, err)
	}
	system := model.Last().Messages[0].Text
	for _, want := range []string{"tiny", "install", "enable_service", "{{ip."} {
		if !strings.Contains(system, want) {
			t.Errorf("the system prompt lacks %q", want)
		}
	}
	if _, err := s.app.Stands.CompilePlan(context.Background(), localWho(t, s), s.cfg.DefaultBench, ans.Plan); err != nil {
		t.Fatalf("the planned stand does not compile: %v", err)
	}
	// A plan still invalid after the retry is a draft: an error result.
	bad := `{"name": "web", "machines": [{"role": "web-1", "template": "tiny", "steps": []}]}`
	model.Reply(visiontest.Reply{Content: bad}, visiontest.Reply{Content: bad})
	out, res := call(t, cs, "stand_plan", map[string]any{"goal": "a web server"})
	if !res.IsError || !strings.Contains(out, `"valid": false`) || !strings.Contains(out, "web-1") || !strings.Contains(out, `"attempts": 2`) {
		t.Fatalf("draft = %s", out)
	}
	if strings.Contains(out, "plan-key-0123456789") {
		t.Fatal("the key leaked")
	}
}
