package engine

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/engine/stand"
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
		newTool(Def{Name: "stand_plan", Toolset: "stand", Title: "Plan a stand",
			Description: "Ask the planner model for a stand plan (1-4 VMs from templates, each with setup steps) for a goal: answers the plan as JSON for stand_apply; an invalid draft is an error listing its problems.",
			Summary:     "Ask the planner model for a stand plan; JSON with the plan, or a draft with its problems (see Stands)",
			Effect:      readOnly("changes nothing; the goal and the template list go to the planner model's endpoint").reaching()}, standPlan),
		newTool(Def{Name: "stand_apply", Toolset: "stand", Title: "Build a stand",
			Description: "Build a stand in the background: clone each machine as <owner>-repro-<stand>-<role>, boot it, run its steps, snapshot it clean. Returns at once: follow with stand_status.",
			Summary:     "Build a stand (1-4 VMs) in the background; answers at once. `resume=true` continues an interrupted or failed one",
			Effect:      runsInGuest("clones VMs and runs the plan's commands in them as root; a resume runs a cut step again")}, standApplyTool),
		newTool(Def{Name: "stand_status", Toolset: "stand", Title: "Stand status",
			Description: "A stand's progress (each machine: vmid, ip, phases and steps with their seconds), or your stands.",
			Summary:     "JSON progress of a stand (every machine: its phases and steps, each timed), or the list of yours",
			Effect:      readOnly("reads the stand's record")}, standStatus),
		newTool(Def{Name: "stand_destroy", Toolset: "stand", Title: "Destroy a stand",
			Description: "Destroy a stand's VMs and forget it; refused while it builds unless force=true.",
			Summary:     "Destroy every `<owner>-repro-<stand>-*` VM; `force` stops a build first",
			Effect:      destructiveOnce("removes every VM of the stand and its disks")}, standDestroy),
	}
}

// jsonAnswer answers v as indented JSON, as an error result when failed.
func jsonAnswer(v any, failed bool) *mcp.CallToolResult {
	raw, _ := json.MarshalIndent(v, "", "  ")
	return &mcp.CallToolResult{IsError: failed, Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}
}

func standPlan(ctx context.Context, c *Call, in *standPlanArgs) (*mcp.CallToolResult, error) {
	ans, err := c.Server.app.Stands.Plan(ctx, c.Caller, c.Bench, in.Goal)
	if err != nil {
		return nil, err
	}
	return jsonAnswer(ans, !ans.OK || !ans.Valid), nil
}

func standApplyTool(ctx context.Context, c *Call, in *standApplyArgs) (*mcp.CallToolResult, error) {
	name, err := c.Server.app.Stands.Apply(ctx, c.Caller, c.Creds, stand.Apply{Plan: in.Plan, Stand: in.Stand, Pool: in.Pool, Resume: in.Resume, Bench: c.Bench})
	if err != nil {
		return nil, err
	}
	return jsonAnswer(map[string]any{"ok": true, "stand": name, "status": store.StandRunning}, false), nil
}

func standStatus(ctx context.Context, c *Call, in *standStatusArgs) (*mcp.CallToolResult, error) {
	v, err := c.Server.app.Stands.Status(ctx, c.Caller, c.Bench, in.Stand)
	if err != nil {
		return nil, err
	}
	return jsonAnswer(v, false), nil
}

func standDestroy(ctx context.Context, c *Call, in *standDestroyArgs) (*mcp.CallToolResult, error) {
	if !in.Confirm {
		return nil, hostapi.Failf("pass confirm=true", "stand_destroy destroys every VM of the stand: it needs confirm=true")
	}
	d, err := c.Server.app.Stands.Destroy(ctx, c.Caller, c.Bench, in.Stand, in.Force)
	if err != nil {
		return nil, err
	}
	if d.VMIDs == nil {
		d.VMIDs = []int{}
	}
	if d.Failed == nil {
		d.Failed = []map[string]any{}
	}
	return jsonAnswer(map[string]any{"ok": len(d.Failed) == 0, "destroyed": d.VMIDs, "failed": d.Failed}, len(d.Failed) > 0), nil
}
