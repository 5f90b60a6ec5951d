package engine

import (
	"context"
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/store"
)

// The stand tools: plan a stand with a model, build it in the background,
// follow it, destroy it. Answers are JSON: the model passes them on.

type standPlanArgs struct {
	Goal string `json:"goal" desc:"in plain language: the machines, what to set up, what to check"`
}

type standApplyArgs struct {
	Plan   json.RawMessage `json:"plan,omitempty" desc:"{name, machines: [{role, template, steps}], notes}, as stand_plan writes"`
	Stand  string          `json:"stand,omitempty" desc:"with resume: the stand to continue"`
	Pool   string          `json:"pool,omitempty" desc:"when you have several"`
	Resume bool            `json:"resume,omitempty" desc:"continue from the first unfinished machine and step" default:"false"`
}

type standStatusArgs struct {
	Stand string `json:"stand,omitempty" desc:"leave out to list yours"`
}

type standDestroyArgs struct {
	Stand   string `json:"stand"`
	Confirm bool   `json:"confirm" desc:"must be true"`
	Force   bool   `json:"force,omitempty" desc:"stop a build in progress first" default:"false"`
}

func standTools() []*Tool {
	return []*Tool{
		newTool("stand_plan", "Ask the planner model for a stand plan (1-4 VMs from templates, each with setup steps) for a goal: answers the plan as JSON for stand_apply; an invalid draft is an error listing its problems.",
			titled(mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(true)}, "Plan a stand"), standPlan),
		newTool("stand_apply", "Build a stand in the background: clone each machine as <owner>-repro-<stand>-<role>, boot it, run its steps, snapshot it clean. Returns at once: follow with stand_status.",
			titled(runsInGuest, "Build a stand"), standApplyTool),
		newTool("stand_status", "A stand's progress (each machine: vmid, ip, phases and steps with their seconds), or your stands.",
			titled(readOnly, "Stand status"), standStatus),
		newTool("stand_destroy", "Destroy a stand's VMs and forget it; refused while it builds unless force=true.",
			titled(destructiveIdempotent, "Destroy a stand"), standDestroy),
	}
}

// jsonAnswer answers v as indented JSON, as an error result when failed.
func jsonAnswer(v any, failed bool) *mcp.CallToolResult {
	raw, _ := json.MarshalIndent(v, "", "  ")
	return &mcp.CallToolResult{IsError: failed, Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}
}

func standPlan(ctx context.Context, c *Call, in *standPlanArgs) (*mcp.CallToolResult, error) {
	s := c.Server
	if s.planner == nil {
		return nil, hostapi.Failf("configure [planner] (api, model, key_env) or PV_AI_PLAN_API/PV_AI_PLAN_KEY (default: the vision ones); or write the plan yourself and call stand_apply", "the planner model is not configured")
	}
	if s.scripts == nil {
		return nil, errNoScripts
	}
	env, _, err := s.standEnv(ctx, c.Caller, c.Bench, false)
	if err != nil {
		return nil, err
	}
	env.Building = 0 // a plan is not a build: the limit is stand_apply's
	ans, err := s.planner.Plan(ctx, in.Goal, env)
	if err != nil {
		return nil, err
	}
	return jsonAnswer(ans, !ans.OK || !ans.Valid), nil
}

func standApplyTool(ctx context.Context, c *Call, in *standApplyArgs) (*mcp.CallToolResult, error) {
	s := c.Server
	creds, err := s.callerOf(c.Request)
	if err != nil {
		return nil, err
	}
	name, err := s.applyStand(ctx, c.Caller, creds.creds, standApply{Plan: in.Plan, Stand: in.Stand, Pool: in.Pool, Resume: in.Resume, Bench: c.Bench})
	if err != nil {
		return nil, err
	}
	return jsonAnswer(map[string]any{"ok": true, "stand": name, "status": store.StandRunning}, false), nil
}

func standStatus(ctx context.Context, c *Call, in *standStatusArgs) (*mcp.CallToolResult, error) {
	v, err := c.Server.standStatus(ctx, c.Caller, c.Bench, in.Stand)
	if err != nil {
		return nil, err
	}
	return jsonAnswer(v, false), nil
}

func standDestroy(ctx context.Context, c *Call, in *standDestroyArgs) (*mcp.CallToolResult, error) {
	if !in.Confirm {
		return nil, hostapi.Failf("pass confirm=true", "stand_destroy destroys every VM of the stand: it needs confirm=true")
	}
	destroyed, failed, err := c.Server.destroyStand(ctx, c.Caller, c.Bench, in.Stand, in.Force)
	if err != nil {
		return nil, err
	}
	if destroyed == nil {
		destroyed = []int{}
	}
	if failed == nil {
		failed = []map[string]any{}
	}
	return jsonAnswer(map[string]any{"ok": len(failed) == 0, "destroyed": destroyed, "failed": failed}, len(failed) > 0), nil
}

// StandView is a stand as stand_status shows it.
type StandView struct {
	OK       bool          `json:"ok"`
	Stand    string        `json:"stand"`
	Status   string        `json:"status"`
	Machines []MachineView `json:"machines"`
	Error    *string       `json:"error"`
	Started  time.Time     `json:"started"`
	Ended    *time.Time    `json:"ended,omitempty"`
	Seconds  float64       `json:"seconds"`
}

// MachineView is one machine of a stand.
type MachineView struct {
	Role     string     `json:"role"`
	Template string     `json:"template"`
	VMID     int        `json:"vmid,omitempty"`
	Node     string     `json:"node,omitempty"`
	IP       string     `json:"ip,omitempty"`
	Status   string     `json:"status"`
	Needs    []string   `json:"needs,omitempty"`
	Steps    []StepView `json:"steps"`
	Done     bool       `json:"done"`
	Error    string     `json:"error,omitempty"`
	Started  *time.Time `json:"started,omitempty"`
	Ended    *time.Time `json:"ended,omitempty"`
	Seconds  float64    `json:"seconds,omitempty"` // its own build time, clone to snapshot
	// Phases are where that time went, in order (a resumed build adds its
	// own): cloning, booting, waiting (for the machines it needs), steps
	// (each step's time is in Steps), snapshot.
	Phases []PhaseView `json:"phases,omitempty"`
	// Transcript is the last run of its steps, relative to the state
	// directory.
	Transcript string `json:"transcript,omitempty"`
}

// PhaseView is one timed part of a machine's build.
type PhaseView struct {
	Name    string     `json:"name"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	Seconds float64    `json:"seconds,omitempty"` // to now while it runs; absent when its builder died in it
}

// StepView is one step of a machine.
type StepView struct {
	N       int        `json:"n"`
	Label   string     `json:"label"`
	Status  string     `json:"status"` // pending, running, done, failed, interrupted
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
	Seconds float64    `json:"seconds,omitempty"` // to now while it runs
	Error   string     `json:"error,omitempty"`
}

// StandSummary is one line of the list.
type StandSummary struct {
	Stand    string    `json:"stand"`
	Status   string    `json:"status"`
	Machines int       `json:"machines"`
	Done     int       `json:"done"`
	Error    string    `json:"error,omitempty"`
	Started  time.Time `json:"started"`
}

func (s *Server) standStatus(ctx context.Context, who *hostapi.Caller, benchName, name string) (any, error) {
	if _, err := s.standStore(); err != nil {
		return nil, err
	}
	list, err := s.refreshStands(ctx, benchName, who.Owner())
	if err != nil {
		return nil, err
	}
	if name == "" {
		out := []StandSummary{}
		for _, st := range list {
			sum := StandSummary{Stand: st.Name, Status: st.Status, Machines: len(st.Machines), Error: st.Error, Started: st.Created}
			for _, m := range st.Machines {
				if m.Status == "done" {
					sum.Done++
				}
			}
			out = append(out, sum)
		}
		return map[string]any{"ok": true, "stands": out}, nil
	}
	for _, st := range list {
		if st.Name == name {
			return viewStand(st, s.cfg.StateDir), nil
		}
	}
	return nil, hostapi.Failf("stand_status without stand lists yours; a stand is forgotten a day after it stopped (its VMs stay: stand_destroy finds them by name)", "no stand %s", name)
}

func viewStand(st store.Stand, stateDir string) StandView {
	v := StandView{OK: true, Stand: st.Name, Status: st.Status, Started: st.Created, Machines: []MachineView{}}
	now := time.Now().UTC()
	end := now
	if !st.Ended.IsZero() {
		v.Ended, end = &st.Ended, st.Ended
	}
	v.Seconds = end.Sub(st.Created).Seconds()
	running := st.Status == store.StandRunning
	// seconds is a part's time: to now while the stand builds, none when
	// it never ended (its builder died in it).
	seconds := func(from, to time.Time) float64 {
		switch {
		case !to.IsZero():
			return to.Sub(from).Seconds()
		case running && !from.IsZero():
			return now.Sub(from).Seconds()
		}
		return 0
	}
	if st.Error != "" {
		v.Error = &st.Error
	}
	for _, m := range st.Machines {
		mv := MachineView{Role: m.Role, Template: m.Template, VMID: m.VMID, Node: m.Node, IP: m.IP, Status: m.Status,
			Needs: m.Needs, Done: m.Status == "done", Error: m.Error, Started: timePtr(m.Started), Ended: timePtr(m.Ended),
			Transcript: relPath(stateDir, m.Transcript), Steps: []StepView{}}
		if !m.Started.IsZero() && !m.Ended.IsZero() {
			mv.Seconds = m.Ended.Sub(m.Started).Seconds()
		}
		for _, p := range m.Phases {
			mv.Phases = append(mv.Phases, PhaseView{Name: p.Name, Started: p.Started, Ended: timePtr(p.Ended), Seconds: seconds(p.Started, p.Ended)})
		}
		for _, step := range m.Steps {
			sv := StepView{N: step.N, Label: step.Label, Started: timePtr(step.Started), Ended: timePtr(step.Ended), Error: step.Error, Status: "pending",
				Seconds: seconds(step.Started, step.Ended)}
			switch {
			case step.Error != "":
				sv.Status = "failed"
			case !step.Ended.IsZero():
				sv.Status = "done"
			case !step.Started.IsZero() && st.Status == store.StandRunning:
				sv.Status = "running"
			case !step.Started.IsZero():
				sv.Status = "interrupted" // cut by a restart or a destroy: resume runs it again
			}
			mv.Steps = append(mv.Steps, sv)
		}
		v.Machines = append(v.Machines, mv)
	}
	return v
}

// relPath is a path inside dir as relative to it, so an answer shows no
// host path; one outside it (never written so) by its name alone.
func relPath(dir, path string) string {
	if path == "" {
		return ""
	}
	if rel, err := filepath.Rel(dir, path); err == nil && dir != "" && filepath.IsLocal(rel) {
		return rel
	}
	return filepath.Base(path)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
