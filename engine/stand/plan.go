// Package stand is what a stand is before it is built: a plan (JSON written
// by a planner model or a person), the one validator every entry point uses
// (stand_plan, stand_apply, the CLI), the compiler that turns a valid plan
// into one JavaScript module run by the same runtime as every script, and
// the planner that asks a model for a plan. It knows nothing of backends:
// the engine builds what it compiles.
package stand

import (
	"encoding/json"
	"time"

	"github.com/poligon/poligon/runtime"
)

// Plan is a stand as written: name, machines in boot order, free notes.
type Plan struct {
	Name     string    `json:"name"`
	Machines []Machine `json:"machines"`
	Notes    string    `json:"notes,omitempty"` // never executed
}

// Machine is one VM of a stand.
type Machine struct {
	Role     string `json:"role"`
	Template string `json:"template"` // exact name or a substring matching exactly one
	Steps    []Step `json:"steps"`
}

// Step is one step: an object with exactly one key, the step kind (exec,
// expect, recipe, ...), whose value is the kind's argument as written.
type Step struct {
	Kind string
	Arg  json.RawMessage
}

// Env is what validation checks a plan against: the live backend and the
// loaded scripts, read by the caller just before validating.
type Env struct {
	// Templates are the clonable template names; those containing
	// "not-for-clone" are refused.
	Templates []string
	// Scripts are the loaded scripts by name: recipe steps may name any
	// (recipes are scripts), script steps only those with Tool set.
	Scripts map[string]runtime.Manifest
	// Owner prefixes VM names: <owner>-repro-<stand>-<role>, ≤ 63 characters.
	Owner string
	// Existing are the caller's VM names; one named <owner>-repro-<stand>-*
	// refuses the plan (unless Resume).
	Existing []string
	// Building is how many stands the caller is building now.
	Building int
	// MaxMachines (default 4) and MaxBuilding (default 2) are the limits.
	MaxMachines int
	MaxBuilding int
	// Resume: the plan continues a stand of this name, so its own VMs and
	// its own build do not count against it.
	Resume bool
}

// Problem is one thing wrong with a plan, naming where it is.
type Problem struct {
	Machine string `json:"machine,omitempty"` // role (or "#2" when the role itself is bad); "" for the plan
	Step    int    `json:"step,omitempty"`    // 1-based; 0 for the machine itself
	Kind    string `json:"kind,omitempty"`    // the step kind
	Message string `json:"message"`
}

// Resolved is a valid plan ready to build and compile.
type Resolved struct {
	Plan
	// Templates[i] is the full template name machine i resolved to.
	Templates []string
	// Needs[i] are the roles whose {{ip.<role>}} machine i uses, in plan
	// order: machine i's steps start only when those machines are done.
	Needs [][]string
	// ScriptTimeouts are the manifest timeouts of the recipes and scripts
	// the steps call (0: none), so the compiled module's time limit covers
	// a recipe that may take longer than the usual 600 s.
	ScriptTimeouts map[string]time.Duration
}
