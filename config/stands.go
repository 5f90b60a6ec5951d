package config

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// Planner is the text model that writes stand plans: an OpenAI-compatible
// chat/completions endpoint. Its endpoint and key default to the vision
// model's (PV_AI_API, PV_AI_KEY), so one endpoint can serve both.
type Planner struct {
	API   string `toml:"api"`   // the full chat/completions URL
	Model string `toml:"model"` // default qwen3.8-27b
	// Options: a JSON object merged into each request body (model and
	// messages always win); default {"temperature":0.1,"max_tokens":3000}.
	Options string   `toml:"options"`
	Notes   string   `toml:"notes"`   // a file that replaces the shipped planner notes (the ALT rules)
	Timeout Duration `toml:"timeout"` // per call; default 120s
	// The key is never written in this file: KeyEnv names the variable
	// (default PV_AI_PLAN_KEY, then the vision key), or KeyFile a file.
	KeyEnv  string `toml:"key_env"`
	KeyFile string `toml:"key_file"`

	Key Secret `toml:"-"`
}

// Configured reports whether the planner has an endpoint.
func (p Planner) Configured() bool { return p.API != "" }

// Stands bounds stand plans.
type Stands struct {
	MaxMachines int `toml:"max_machines"` // per stand; default 4
	MaxBuilding int `toml:"max_building"` // stands building at once per owner; default 2
}

// standsDefaults fills the planner and stand settings.
func (c *Config) standsDefaults() {
	// The planner defaults to the vision endpoint and key, each on its own
	// (the manual's PV_AI_PLAN_API / PV_AI_PLAN_KEY); a key named by
	// key_env or key_file is that key or none.
	p := &c.Planner
	if p.API == "" {
		p.API = c.Vision.API
	}
	if p.Key == "" && p.KeyEnv == "" && p.KeyFile == "" {
		p.Key = c.Vision.Key
	}
	if p.Configured() && p.Model == "" {
		p.Model = "qwen3.8-27b"
	}
	if p.Timeout.Duration == 0 {
		p.Timeout.Duration = 120 * time.Second
	}
	if c.Stands.MaxMachines == 0 {
		c.Stands.MaxMachines = 4
	}
	if c.Stands.MaxBuilding == 0 {
		c.Stands.MaxBuilding = 2
	}
}

// checkPlanner checks the planner and stand settings.
func (c *Config) checkPlanner() []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	p := c.Planner
	if p.Configured() && !strings.HasPrefix(p.API, "https://") && !strings.HasPrefix(p.API, "http://") {
		bad("planner.api (PV_AI_PLAN_API, default PV_AI_API) must be an http(s) URL of a chat/completions endpoint")
	}
	if p.Options != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(p.Options), &obj); err != nil || obj == nil {
			bad(`planner.options (PV_AI_PLAN_OPTIONS) must be a JSON object, e.g. {"temperature":0.1,"max_tokens":3000} (got %.40q)`, p.Options)
		}
	}
	if p.KeyFile != "" {
		if _, err := os.ReadFile(p.KeyFile); err != nil {
			bad("planner.key_file: %v", err)
		}
	}
	if p.Notes != "" {
		if _, err := os.ReadFile(p.Notes); err != nil {
			bad("planner.notes: %v (a text file of rules for the planner, or leave it out for the shipped notes)", err)
		}
	}
	if p.Timeout.Duration < 0 {
		bad("planner.timeout %s: must be positive", p.Timeout.Duration)
	}
	if c.Stands.MaxMachines < 1 {
		bad("stands.max_machines %d: at least 1", c.Stands.MaxMachines)
	}
	if c.Stands.MaxBuilding < 1 {
		bad("stands.max_building %d: at least 1", c.Stands.MaxBuilding)
	}
	return problems
}
