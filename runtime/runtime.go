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
	"sort"
	"strings"
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
// Err is the host's own error behind it (nil when it came from a
// transcript or across the Wasm boundary), so a script failure keeps the
// backend's error chain for errors.Is.
type HostError struct {
	Call    string
	Message string
	Hint    string
	Err     error
}

func (e *HostError) Error() string { return e.Message }
func (e *HostError) Unwrap() error { return e.Err }

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
	Title       string        `json:"title,omitempty"` // the tool's title; "": its name in words
	Params      []Param       `json:"params"`          // in declaration order
	Tool        bool          `json:"tool"`            // false: a recipe, callable from scripts only
	Timeout     time.Duration `json:"timeout,omitempty"`
	// Recipes lists the recipes the script's source names literally in
	// vm.recipe("name", ...) calls, for load-time validation.
	Recipes []RecipeCall `json:"recipes,omitempty"`
	// MaxSleep is the longest literal x.sleep(<number>) in the script's
	// source, in seconds (0: none), so a stand plan's sleep limit covers
	// the recipes it calls.
	MaxSleep float64 `json:"max_sleep,omitempty"`
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
	if strings.ContainsAny(m.Title, "\r\n") {
		return errors.New("title must be one line")
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

// Bind answers the params a run gets: the given ones, each declared param
// left out taking its default. A required param left out, or one the
// manifest does not declare, is an error before anything runs. vmid and
// bench are the server's and pass through unread. Every runtime, recipe
// call and replay binds through here, so defaults mean the same for JS and
// Wasm.
func (m Manifest) Bind(given map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(m.Params))
	declared := make(map[string]bool, len(m.Params))
	for _, p := range m.Params {
		declared[p.Name] = true
		if v, ok := given[p.Name]; ok {
			out[p.Name] = v
		} else if p.Default != nil {
			out[p.Name] = *p.Default
		} else {
			return nil, fmt.Errorf("script %s: param %q is required", m.Name, p.Name)
		}
	}
	var unknown []string
	for name := range given {
		if !declared[name] && name != "vmid" && name != "bench" {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("script %s: unknown param %q (it declares %s)", m.Name, unknown[0], m.ParamNames())
	}
	return out, nil
}

// ParamNames lists the declared params for messages: "a, b", or "none".
func (m Manifest) ParamNames() string {
	if len(m.Params) == 0 {
		return "none"
	}
	names := make([]string, len(m.Params))
	for i, p := range m.Params {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// Limits bound one run.
type Limits struct {
	Timeout  time.Duration // wall time of the run; default DefaultLimits'
	MemoryMB int           // heap (JS) or linear memory (Wasm) ceiling
}

// The defaults of every runtime (JS and Wasm alike; the config's limits
// start from these too): stdlib/poligon.d.ts and the Go SDK document them,
// and a test checks that they agree.
var DefaultLimits = Limits{Timeout: 10 * time.Minute, MemoryMB: 256}

// DefaultTool: a script is a tool unless its manifest says tool: false.
const DefaultTool = true

// Resolve fills what l leaves out: the manifest's own timeout, else
// DefaultLimits'.
func (l Limits) Resolve(m Manifest) Limits {
	if l.Timeout <= 0 {
		l.Timeout = m.Timeout
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultLimits.Timeout
	}
	if l.MemoryMB <= 0 {
		l.MemoryMB = DefaultLimits.MemoryMB
	}
	return l
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
