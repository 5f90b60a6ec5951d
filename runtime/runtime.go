// Package runtime is the contract between poligon and its script runtimes
// (runtime/js on goja, runtime/wasm on wazero).
//
// A script is a module that declares a Manifest and a run entry point. The
// runtime compiles it once (Load) and runs it many times, each run in a
// fresh sandbox (one goja runtime or one wasm instance per run) against a
// Host: the only door out of the sandbox. Every host call is a name plus JSON
// arguments answered with JSON, so the same calls serve JavaScript and Wasm,
// are recorded in a transcript and can be replayed without a machine.
package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Host answers a script's calls. Implementations check policy, take locks,
// talk to the machine and record the call; a runtime only marshals.
//
// A call that fails returns an error whose text the script sees (and may
// catch); a *HostError carries a hint as well.
type Host interface {
	Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error)
}

// HostFunc adapts a function to Host.
type HostFunc func(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error)

// Call calls f.
func (f HostFunc) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	return f(ctx, name, args)
}

// HostError is a failed host call as the script and the tool answer see it.
type HostError struct {
	Call    string
	Message string
	Hint    string
}

func (e *HostError) Error() string { return e.Message }

// Param is one script parameter. Every parameter is a string; one without a
// default is required.
type Param struct {
	Name        string  `json:"name"`
	Description string  `json:"description,omitempty"`
	Default     *string `json:"default,omitempty"`
}

// Manifest is what a script declares about itself.
type Manifest struct {
	Name        string        `json:"name"` // ^[a-z][a-z0-9_]*$; a tool becomes vm_<name>
	Description string        `json:"description"`
	Params      []Param       `json:"params"` // in declaration order
	Tool        bool          `json:"tool"`   // false: a recipe, callable from scripts only
	Timeout     time.Duration `json:"timeout,omitempty"`
	// Recipes lists the recipes the script's source names literally in
	// vm.recipe("name", ...) calls, for load-time validation.
	Recipes []RecipeCall `json:"recipes,omitempty"`
}

// RecipeCall is one literal recipe call found in a script.
type RecipeCall struct {
	Name   string   `json:"name"`
	Params []string `json:"params"` // the literal keys of its params object, when literal
}

// NamePattern is the pattern every script name must match.
var NamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Validate checks the manifest's own fields.
func (m Manifest) Validate() error {
	if !NamePattern.MatchString(m.Name) {
		return fmt.Errorf("name %q must match %s", m.Name, NamePattern)
	}
	if m.Description == "" {
		return errors.New("description is empty")
	}
	seen := map[string]bool{"vmid": true, "bench": true}
	for _, p := range m.Params {
		if !NamePattern.MatchString(p.Name) {
			return fmt.Errorf("param %q must match %s", p.Name, NamePattern)
		}
		if seen[p.Name] {
			return fmt.Errorf("param %q is declared twice or is reserved (vmid and bench are added by the server)", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// Limits bound one run.
type Limits struct {
	Timeout  time.Duration // wall time of the run; default 10 minutes
	MemoryMB int           // heap (JS) or linear memory (Wasm) ceiling
}

// Run is one execution's input.
type Run struct {
	Host   Host
	Params map[string]string // defaults already applied
	VMID   int
	Seed   int64     // seeds Math.random and friends
	Clock  time.Time // what the script sees as "now"
	Log    func(msg string)
	Limits Limits
}

// Result is what a run answers: the JSON value its run function returned.
type Result struct {
	Value json.RawMessage
}

// Module is a compiled script, immutable and safe for concurrent runs.
type Module interface {
	Manifest() Manifest
	Run(ctx context.Context, run Run) (Result, error)
}

// ScriptError is a run that failed inside the script: an uncaught throw, a
// limit, a cancellation. Where is "file:line:col" when known.
type ScriptError struct {
	Script  string
	Where   string
	Message string
	Hint    string
	Err     error // the host error or limit behind it, if any
}

func (e *ScriptError) Error() string {
	if e.Where != "" {
		return fmt.Sprintf("%s (at %s)", e.Message, e.Where)
	}
	return e.Message
}

func (e *ScriptError) Unwrap() error { return e.Err }

// Limit errors, wrapped by ScriptError.
var (
	ErrTimeout   = errors.New("script time limit reached")
	ErrMemory    = errors.New("script memory limit reached")
	ErrCancelled = errors.New("script cancelled")
)
