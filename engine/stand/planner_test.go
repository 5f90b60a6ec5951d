package stand

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/poligon/poligon/backends/vision"
	"github.com/poligon/poligon/backends/vision/visiontest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/runtime"
)

const planKey = "sk-PLAN-SECRET-42"

func str(s string) *string { return &s }

// testEnv: two clonable templates, one hidden, a recipe and a tool script.
func testEnv() Env {
	return Env{
		Templates: []string{"kworkstation-11.4", "p11-server-11.1-x86-64", "alt-base-not-for-clone"},
		Scripts: map[string]runtime.Manifest{
			"install": {Name: "install", Description: "Install packages\nwith apt-get", Tool: true, Params: []runtime.Param{
				{Name: "packages", Description: "space-separated names"}, {Name: "update", Default: str("no")}}},
			"enable_service": {Name: "enable_service", Description: "Enable and start a systemd service", Params: []runtime.Param{{Name: "service"}}},
		},
		Owner: "alice", MaxMachines: 4, MaxBuilding: 2,
	}
}

const (
	goodPlan = `{"name": "web", "machines": [{"role": "server", "template": "p11-server", "steps": [{"recipe": {"name": "install", "packages": "nginx"}}]}], "notes": "check by hand"}`
	badPlan  = `{"name": "web", "machines": [{"role": "server", "template": "nosuch", "steps": []}]}`
)

func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// syncBuf is a log sink the client's goroutine-free calls can share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newPlanner(t *testing.T, cfg config.Planner) (*Planner, *visiontest.Server, *syncBuf) {
	t.Helper()
	srv := visiontest.New()
	t.Cleanup(srv.Close)
	if cfg.API == "" {
		cfg.API = srv.ChatURL()
	}
	if cfg.Model == "" {
		cfg.Model = "qwen3.8-27b"
	}
	cfg.Key = planKey
	logs := &syncBuf{}
	p, err := NewPlanner(cfg, vision.Options{Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil || p == nil {
		t.Fatalf("NewPlanner: %v", err)
	}
	return p, srv, logs
}

func usage(p, c int) *visiontest.Usage { return &visiontest.Usage{Prompt: p, Completion: c} }

// An invalid first plan goes back with the validator's complaints and the
// model's own reply; the corrected one is the answer, tokens summed.
func TestPlanRetryAfterProblems(t *testing.T) {
	p, srv, logs := newPlanner(t, config.Planner{})
	srv.Reply(visiontest.Reply{Content: badPlan, Usage: usage(1000, 50)}, visiontest.Reply{Content: goodPlan, Usage: usage(1100, 60)})
	env := testEnv()
	a, err := p.Plan(t.Context(), "a web server", env)
	if err != nil {
		t.Fatal(err)
	}
	if !a.OK || !a.Valid || a.Attempts != 2 || a.PromptTokens != 2100 || a.CompletionTokens != 110 || a.Model != "qwen3.8-27b" ||
		a.Notes != "check by hand" || a.Error != "" || len(a.Errors) != 0 || a.Errors == nil {
		t.Errorf("answer %+v", a)
	}
	if string(a.Plan) != compact(t, goodPlan) {
		t.Errorf("plan %s", a.Plan)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if m := reqs[0].Messages; len(m) != 2 || m[0].Role != "system" || m[1].Role != "user" || m[1].Text != "a web server" {
		t.Errorf("first request %+v", m)
	}
	_, probs := Check([]byte(badPlan), env)
	if len(probs) == 0 {
		t.Fatal("the bad plan passes Check")
	}
	m := reqs[1].Messages
	if len(m) != 4 || m[2].Role != "assistant" || m[2].Text != badPlan || m[3].Role != "user" || m[0].Text != reqs[0].Messages[0].Text {
		t.Fatalf("retry messages %+v", m)
	}
	for _, want := range []string{"Your plan has these problems:", probs[0].String(), "Answer the corrected plan only"} {
		if !strings.Contains(m[3].Text, want) {
			t.Errorf("the retry lacks %q:\n%s", want, m[3].Text)
		}
	}
	out := logs.String()
	for _, want := range []string{"purpose=planner", "seq=1", "seq=2", "prompt_tokens=1100"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// Prose twice: a draft-less error answer with errors, attempts and tokens.
func TestPlanProseOnly(t *testing.T) {
	p, srv, _ := newPlanner(t, config.Planner{})
	srv.Reply(visiontest.Reply{Content: "I would clone a server and install nginx.", Usage: usage(10, 5)},
		visiontest.Reply{Content: "Sorry, here it is in words: one server.", Usage: usage(20, 5)})
	a, err := p.Plan(t.Context(), "a web server", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if a.OK || a.Valid || a.Attempts != 2 || a.Plan != nil || a.PromptTokens != 30 || a.CompletionTokens != 10 || a.Error == "" {
		t.Errorf("answer %+v", a)
	}
	if len(a.Errors) != 1 || !strings.Contains(a.Errors[0], "no JSON object") {
		t.Errorf("errors %q", a.Errors)
	}
	if m := srv.Last().Messages; len(m) != 4 || !strings.Contains(m[3].Text, "no JSON object") {
		t.Errorf("retry %+v", m)
	}
}

// A plan still invalid after the retry comes back as a draft with errors.
func TestPlanDraft(t *testing.T) {
	p, srv, _ := newPlanner(t, config.Planner{})
	srv.Reply(reply(badPlan), reply("Fixed:\n"+badPlan))
	a, err := p.Plan(t.Context(), "a web server", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if a.OK || a.Valid || a.Attempts != 2 || string(a.Plan) != compact(t, badPlan) || len(a.Errors) == 0 || !strings.Contains(a.Error, "draft") {
		t.Errorf("answer %+v", a)
	}
	j, _ := json.Marshal(a)
	if !strings.Contains(string(j), `"valid":false`) || !strings.Contains(string(j), `"plan":{"name":"web"`) {
		t.Errorf("json %s", j)
	}
}

func reply(s string) visiontest.Reply { return visiontest.Reply{Content: s} }

// {"error": why} is a refusal: no retry, ok false, the reason.
func TestPlanRefusal(t *testing.T) {
	p, srv, _ := newPlanner(t, config.Planner{})
	srv.Reply(visiontest.Reply{Content: "```json\n{\"error\": \"no Windows template exists\"}\n```", Usage: usage(800, 12)})
	a, err := p.Plan(t.Context(), "a Windows domain", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if a.OK || a.Valid || a.Attempts != 1 || !strings.Contains(a.Error, "no Windows template exists") || a.PromptTokens != 800 || a.Plan != nil || srv.Count() != 1 {
		t.Errorf("answer %+v", a)
	}
}

// A reply cut at max_tokens is sent back saying so; the retry succeeds.
func TestPlanCutAtMaxTokens(t *testing.T) {
	p, srv, _ := newPlanner(t, config.Planner{})
	srv.Reply(visiontest.Reply{Content: goodPlan[:60], Finish: "length"}, reply(goodPlan))
	a, err := p.Plan(t.Context(), "a web server", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if !a.Valid || a.Attempts != 2 {
		t.Errorf("answer %+v", a)
	}
	retry := srv.Last().Messages[3].Text
	if !strings.Contains(retry, "cut off at the token limit") || !strings.Contains(retry, "not closed") {
		t.Errorf("retry %s", retry)
	}
}

// A plan cut at max_tokens twice says so and how to raise the limit (with
// the limit now in force), not only "write the plan yourself".
func TestPlanCutTwiceSaysHowToRaiseTheLimit(t *testing.T) {
	for _, tc := range []struct{ options, limit string }{
		{`{"temperature":0.1,"max_tokens":1500}`, `max_tokens is 1500) in attempt 2 of 2: raise max_tokens in [planner] options or PV_AI_PLAN_OPTIONS, e.g. {"max_tokens":3000}`},
		{"", "max_tokens is 3000"}, // the planner's default cap
	} {
		p, srv, _ := newPlanner(t, config.Planner{Options: tc.options})
		srv.Reply(visiontest.Reply{Content: goodPlan[:60], Finish: "length"}, visiontest.Reply{Content: "<think>the server needs " + goodPlan[:30], Finish: "length"})
		a, err := p.Plan(t.Context(), "a web server", testEnv())
		if err != nil {
			t.Fatal(err)
		}
		if a.Valid || a.OK || a.Attempts != 2 || a.Plan != nil {
			t.Errorf("answer %+v", a)
		}
		for _, want := range []string{"cut at the token limit", "finish_reason length", tc.limit, "PV_AI_PLAN_OPTIONS", "[planner] options", `"max_tokens":`} {
			if !strings.Contains(a.Error, want) {
				t.Errorf("options %q: the error lacks %q: %s", tc.options, want, a.Error)
			}
		}
	}
}

// Thinking blocks, fences and prose around the object are stripped; the
// reasoning field is never read as the plan.
func TestPlanThinkingAndFences(t *testing.T) {
	p, srv, _ := newPlanner(t, config.Planner{})
	srv.Reply(reply("<think>maybe {\"machines\": []} or\n" + badPlan + "</think>\nHere is the plan:\n```json\n" + goodPlan + "\n```\nEnjoy {the stand}."))
	a, err := p.Plan(t.Context(), "a web server", testEnv())
	if err != nil || !a.Valid || a.Attempts != 1 || string(a.Plan) != compact(t, goodPlan) {
		t.Errorf("think + fence: %+v %v", a, err)
	}

	// A plan in reasoning_content only, then a reply cut while thinking.
	srv.Reply(visiontest.Reply{ReasoningContent: goodPlan}, visiontest.Reply{Content: "<think>first the server " + goodPlan[:40], Finish: "length"})
	a, err = p.Plan(t.Context(), "a web server", testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if a.Valid || a.Attempts != 2 || a.Plan != nil || len(a.Errors) != 2 || !strings.Contains(a.Errors[0], "cut off") || !strings.Contains(a.Errors[1], "no JSON object") {
		t.Errorf("reasoning-only then cut thinking: %+v", a)
	}
	if retry := srv.Requests()[len(srv.Requests())-1].Messages; !strings.Contains(retry[3].Text, "only reasoning") || retry[2].Text != "(no answer)" {
		t.Errorf("retry after reasoning-only: %+v", retry)
	}

	// The server ate the opening tag: everything before </think> is thought.
	srv.Reply(reply("the user wants " + badPlan + "</think>" + goodPlan))
	if a, err := p.Plan(t.Context(), "a web server", testEnv()); err != nil || !a.Valid || a.Attempts != 1 {
		t.Errorf("closing tag only: %+v %v", a, err)
	}
}

func TestExtractObject(t *testing.T) {
	cases := []struct{ in, want, problem string }{
		{`{"a":1}`, `{"a":1}`, ""},
		{"prose {not json} then " + `{"machines": [], "name": "x"} trailing }`, `{"machines":[],"name":"x"}`, ""},
		{`{"name": "x", "machines": [}`, "", "not valid JSON"},
		{`{"name": "x"`, "", "not closed"},
		{`no braces`, "", "no JSON object"},
		{`<think>{"machines":1}</think>`, "", "no JSON object"},
	}
	for _, c := range cases {
		got, problem := extractObject(stripThinking(c.in))
		if string(got) != c.want || !strings.Contains(problem, c.problem) || (c.problem == "") != (problem == "") {
			t.Errorf("%q: %s, %q", c.in, got, problem)
		}
	}
}

// Options merge into the body (model and messages win); the defaults
// apply without them.
func TestPlanOptions(t *testing.T) {
	p, srv, _ := newPlanner(t, config.Planner{})
	srv.Reply(reply(goodPlan))
	if _, err := p.Plan(t.Context(), "a web server", testEnv()); err != nil {
		t.Fatal(err)
	}
	if b := srv.Last().Body; b["temperature"] != 0.1 || b["max_tokens"] != 3000.0 {
		t.Errorf("default body %v", b)
	}
	p, srv, _ = newPlanner(t, config.Planner{Model: "big", Options: `{"temperature":0.3,"max_tokens":12000,"model":"evil","messages":[{"role":"user","content":"x"}]}`})
	srv.Reply(reply(goodPlan))
	if _, err := p.Plan(t.Context(), "a web server", testEnv()); err != nil {
		t.Fatal(err)
	}
	r := srv.Last()
	if r.Body["temperature"] != 0.3 || r.Body["max_tokens"] != 12000.0 || r.Model != "big" || len(r.Messages) != 2 || r.Messages[0].Role != "system" {
		t.Errorf("merged body %v model %q messages %d", r.Body, r.Model, len(r.Messages))
	}
	if _, err := NewPlanner(config.Planner{API: srv.ChatURL(), Model: "m", Options: `[1]`}, vision.Options{}); err == nil || !strings.Contains(err.Error(), "JSON object") {
		t.Errorf("bad options: %v", err)
	}
}

// A failed call is the error, with a hint; the key is in no error or log.
func TestPlanEndpointErrorNoKey(t *testing.T) {
	p, srv, logs := newPlanner(t, config.Planner{})
	srv.Reply(visiontest.Reply{Status: 401, Body: `{"error": "invalid key ` + planKey + `"}`})
	a, err := p.Plan(t.Context(), "a web server", testEnv())
	var ve *vision.Error
	if !errors.As(err, &ve) || ve.Status != 401 || ve.Hint() == "" {
		t.Fatalf("error %v", err)
	}
	if a.Attempts != 1 || a.Model != "qwen3.8-27b" {
		t.Errorf("answer %+v", a)
	}
	srv.Reply(reply(goodPlan))
	p.Plan(t.Context(), "a web server", testEnv())
	j, _ := json.Marshal(a)
	for what, s := range map[string]string{"error": err.Error(), "hint": ve.Hint(), "answer": string(j), "log": logs.String()} {
		if strings.Contains(s, planKey) {
			t.Errorf("the key is in the %s: %s", what, s)
		}
	}
	if srv.Last().Auth != "Bearer "+planKey {
		t.Errorf("auth %q", srv.Last().Auth)
	}
}

// The prompt: every kind, recipes with params and defaults, the notes, the
// templates without not-for-clone; the same for the same inputs.
func TestSystemPrompt(t *testing.T) {
	env := testEnv()
	s := SystemPrompt(env, ShippedNotes)
	env2 := testEnv()
	env2.Templates = []string{env.Templates[2], env.Templates[1], env.Templates[0]}
	if SystemPrompt(env2, ShippedNotes) != s {
		t.Error("the prompt depends on the order of the templates")
	}
	for _, k := range Kinds {
		if !strings.Contains(s, "- "+k.Name+": "+k.Args) {
			t.Errorf("prompt lacks kind %s", k.Name)
		}
	}
	for _, want := range []string{`"name": "nginxws"`, "{{ip.<role>}}", "At most 4 machines", "alice-repro-<name>-<role>",
		`{"error": "why"}`, "- install: Install packages with apt-get (also a tool", "  - packages (required): space-separated names",
		`  - update = "no"`, "- enable_service: Enable", "hostname has no -I", "- kworkstation-11.4\n- p11-server-11.1-x86-64\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if strings.Contains(s, "not-for-clone") || strings.Index(s, "enable_service:") > strings.Index(s, "install:") {
		t.Errorf("hidden template shown, or recipes unsorted:\n%s", s)
	}
	if strings.Contains(SystemPrompt(env, ""), "# Notes") {
		t.Error("empty notes still make a section")
	}
}

// [planner] notes replaces the shipped notes in the prompt sent.
func TestPlanNotesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.md")
	os.WriteFile(path, []byte("Always use the p11 server template for web servers.\n"), 0o600)
	p, srv, _ := newPlanner(t, config.Planner{Notes: path})
	srv.Reply(reply(goodPlan))
	if _, err := p.Plan(t.Context(), "a web server", testEnv()); err != nil {
		t.Fatal(err)
	}
	sys := srv.Last().System
	if !strings.Contains(sys, "# Notes\n\nAlways use the p11 server template") || strings.Contains(sys, "hostname has no -I") {
		t.Errorf("notes not replaced:\n%s", sys)
	}
	if _, err := NewPlanner(config.Planner{API: srv.ChatURL(), Model: "m", Notes: path + ".missing"}, vision.Options{}); err == nil || !strings.Contains(err.Error(), "planner notes") {
		t.Errorf("missing notes: %v", err)
	}
	if p, err := NewPlanner(config.Planner{}, vision.Options{}); p != nil || err != nil {
		t.Errorf("unconfigured: %v %v", p, err)
	}
}
