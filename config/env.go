package config

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The environment: every variable poligon reads, with the setting it
// overrides. The field's type picks the one parser for it (text; a boolean:
// 1/true/yes/on or 0/false/no/off; a comma-separated list that replaces the
// file's; a positive whole number; a duration), and a value the parser refuses is a
// problem naming the variable, the setting left as the file has it. A new
// key with a variable is a line here.
var envTable = []struct {
	name  string
	field func(*Config) any // *string, *bool, *[]string, *int or *Duration
}{
	{"POLIGON_OWNER", func(c *Config) any { return &c.Owner }},
	{"POLIGON_DATA", func(c *Config) any { return &c.DataDir }},
	{"POLIGON_MCP_EVIDENCE", func(c *Config) any { return &c.EvidenceDir }},
	{"POLIGON_MCP_SCENARIOS", func(c *Config) any { return &c.ScriptsDir }},
	{"POLIGON_MCP_AUDIT", func(c *Config) any { return &c.AuditLog }},
	{"POLIGON_STATE", func(c *Config) any { return &c.StateDir }},
	{"POLIGON_LOG_LEVEL", func(c *Config) any { return &c.LogLevel }},
	{"POLIGON_LOG_FORMAT", func(c *Config) any { return &c.LogFormat }},
	{"POLIGON_MCP_DUMP", func(c *Config) any { return &c.Dump }},
	{"POLIGON_MCP_LOG_PAYLOAD", func(c *Config) any { return &c.LogPayload }},
	{"POLIGON_ACCEL", func(c *Config) any { return &c.Accel }},
	{"POLIGON_DEFAULT_BENCH", func(c *Config) any { return &c.DefaultBench }},
	{"POLIGON_DRY_RUN", func(c *Config) any { return &c.DryRun }},
	// [server]
	{"POLIGON_MCP_BIND", func(c *Config) any { return &c.Server.Bind }},
	{"POLIGON_MCP_ALLOWED_HOSTS", func(c *Config) any { return &c.Server.AllowedHosts }},
	{"POLIGON_MCP_TOOLSETS", func(c *Config) any { return &c.Server.Toolsets }},
	// the eyes
	{"POLIGON_OCR_LANGUAGES", func(c *Config) any { return &c.OCR.Languages }},
	{"PV_AI_API", func(c *Config) any { return &c.Vision.API }},
	{"PV_AI_MODEL", func(c *Config) any { return &c.Vision.Model }},
	{"PV_AI_COORDS", func(c *Config) any { return &c.Vision.Coords }},
	{"PV_AI_OPTIONS", func(c *Config) any { return &c.Vision.Options }},
	{"POLIGON_MCP_SEE_ALWAYS", func(c *Config) any { return &c.Vision.SeeAlways }},
	{"PV_AI_GROUND_API", func(c *Config) any { return &c.Grounding.API }},
	{"PV_AI_GROUND_MODEL", func(c *Config) any { return &c.Grounding.Model }},
	{"PV_AI_GROUND_COORDS", func(c *Config) any { return &c.Grounding.Coords }},
	{"POLIGON_MCP_EVENTS", func(c *Config) any { return &c.Events.Dir }},
	{"POLIGON_MCP_EVENT_SAMPLES", func(c *Config) any { return &c.Events.Samples }},
	{"POLIGON_MCP_EVENTS_MAX_MB", func(c *Config) any { return &c.Events.MaxMB }},
	// [trace]
	{"POLIGON_TRACE_MAX_MB", func(c *Config) any { return &c.Trace.MaxMB }},
	{"POLIGON_TRACE_MAX_AGE", func(c *Config) any { return &c.Trace.MaxAge }},
	{"POLIGON_TRACE_DISABLED", func(c *Config) any { return &c.Trace.Disabled }},
	// [planner]
	{"PV_AI_PLAN_API", func(c *Config) any { return &c.Planner.API }},
	{"PV_AI_PLAN_MODEL", func(c *Config) any { return &c.Planner.Model }},
	{"PV_AI_PLAN_OPTIONS", func(c *Config) any { return &c.Planner.Options }},
	// [dataset]
	{"POLIGON_MCP_DATASET", func(c *Config) any { return &c.Dataset.Dir }},
	{"POLIGON_MCP_DATASET_AGENT", func(c *Config) any { return &c.Dataset.Agent }},
	{"POLIGON_MCP_DATASET_XRANDR", func(c *Config) any { return &c.Dataset.XRandR }},
	{"POLIGON_MCP_DATASET_MIN_FREE_MB", func(c *Config) any { return &c.Dataset.MinFreeMB }},
}

// The variables that are not one setting: secrets named by a key_env or
// found by default, and the manual's JSON bench and storage lists.
const (
	envVisionKey    = "PV_AI_KEY"
	envGroundingKey = "PV_AI_GROUND_KEY"
	envPlannerKey   = "PV_AI_PLAN_KEY"
	envCommonKey    = "POLIGON_MCP_COMMON_KEY"
)

// applyEnv lets environment variables override the file, keeping the
// manual's names where they exist.
func (c *Config) applyEnv(env func(string) string) {
	for _, v := range envTable {
		raw := env(v.name)
		if raw == "" {
			continue
		}
		if err := setFromEnv(v.field(c), raw); err != nil {
			c.envProblems = append(c.envProblems, fmt.Errorf("%s=%q %v", v.name, raw, err))
			continue
		}
		c.Source[v.name] = "env"
	}
	c.Vision.Key = resolveKey(c.Vision.KeyEnv, c.Vision.KeyFile, envVisionKey, env)
	c.Grounding.Key = resolveKey(c.Grounding.KeyEnv, c.Grounding.KeyFile, envGroundingKey, env)
	c.Planner.Key = resolveKey(c.Planner.KeyEnv, c.Planner.KeyFile, envPlannerKey, env)
	c.applyBenchEnv(env)
}

// setFromEnv parses raw into the setting dst points at.
func setFromEnv(dst any, raw string) error {
	switch d := dst.(type) {
	case *string:
		*d = raw
	case *bool:
		switch strings.ToLower(strings.TrimSpace(raw)) {
		case "1", "true", "yes", "on":
			*d = true
		case "0", "false", "no", "off":
			*d = false
		default:
			return fmt.Errorf("is not a boolean: say 1, true, yes or on, or 0, false, no or off")
		}
	case *[]string:
		*d = nil
		for _, x := range strings.Split(raw, ",") {
			if x = strings.TrimSpace(x); x != "" {
				*d = append(*d, x)
			}
		}
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || n <= 0 {
			return fmt.Errorf("is not a positive whole number")
		}
		*d = n
	case *Duration:
		v, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil || v <= 0 {
			return fmt.Errorf("is not a duration like 30s, 10m or 48h")
		}
		d.Duration = v
	default:
		panic(fmt.Sprintf("config: no parser for %T", dst))
	}
	return nil
}

// applyBenchEnv reads the manual's PVE_API, POLIGON_MCP_STANDS and
// POLIGON_MCP_STORAGES, and resolves the physical benches' secrets from
// their variables and files.
func (c *Config) applyBenchEnv(env func(string) string) {
	// The old manual's name for the list of benches ("stands").
	if v := env("POLIGON_MCP_STANDS"); v != "" {
		var list []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			API         string `json:"api"`
			Token       string `json:"token"` // pve: the API token; pikvm, megarac: user:password
			BackendID   string `json:"backend_id"`
			Description string `json:"description"`
			Rental      bool   `json:"rental"`
		}
		if err := decodeEnvArray("POLIGON_MCP_STANDS", v, &list, "{name, type, api, token?, backend_id?, description?, rental?}"); err != nil {
			c.envProblems = append(c.envProblems, err)
			list = nil
		}
		for _, e := range list {
			b := Bench{Name: e.Name, Type: e.Type, Description: e.Description, Endpoint: Endpoint{API: e.API}}
			b.BackendID, b.Rental = e.BackendID, e.Rental
			if b.Type == "pve" {
				b.Token = Secret(e.Token)
			} else if user, pw, ok := strings.Cut(e.Token, ":"); ok {
				b.User, b.Password = user, Secret(pw)
			}
			c.Benches = append(c.Benches, b)
		}
		c.fileBenches = c.fileBenches || len(list) > 0
		c.Source["POLIGON_MCP_STANDS"] = "env"
	}
	if v := env("POLIGON_MCP_STORAGES"); v != "" {
		var st []Storage
		if err := decodeEnvArray("POLIGON_MCP_STORAGES", v, &st, "{name, type, address, user?, description?}"); err != nil {
			c.envProblems = append(c.envProblems, err)
			st = nil
		}
		c.Storages = append(c.Storages, st...)
		c.Source["POLIGON_MCP_STORAGES"] = "env"
	}
	if v := env("PVE_API"); v != "" {
		// The manual's single-cluster setup: PVE_API (+ PVE_TOKEN in stdio mode)
		// adds a bench named pve.
		b := Bench{Name: "pve", Type: "pve", Endpoint: Endpoint{API: v}}
		b.Token, b.BackendID = Secret(env("PVE_TOKEN")), env("POLIGON_MCP_BACKEND_ID")
		c.Benches = append(c.Benches, b)
		c.Source["PVE_API"] = "env"
	}
	common := Secret(env(envCommonKey))
	for i := range c.Benches {
		b := &c.Benches[i]
		if !b.Physical() {
			continue
		}
		if b.Password == "" {
			b.Password = secretFrom(b.PasswordEnv, b.PasswordFile, env)
		}
		b.TOTP = secretFrom(b.TOTPEnv, b.TOTPFile, env)
		b.Key = secretFrom(b.KeyEnv, "", env)
		if b.Key == "" {
			b.Key = common
		}
	}
}

// decodeEnvArray reads the JSON array of variable name into out. A key out
// does not know is refused by name, as the file's unknown keys are: dropped
// silently, a pin_sha256 or an allow would not do what its operator wrote.
func decodeEnvArray(name, v string, out any, shape string) error {
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	err := dec.Decode(out)
	if err == nil {
		return nil
	}
	if key, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%s: unknown key %s: its entries take %s; set the rest in the config file", name, strings.Trim(key, `"`), shape)
	}
	return fmt.Errorf("%s is not a JSON array of %s: %v", name, shape, err)
}

// secretFrom reads a secret from a file, else a variable (Check reports a
// file that cannot be read).
func secretFrom(name, file string, env func(string) string) Secret {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return ""
		}
		return Secret(strings.TrimSpace(string(b)))
	}
	if name == "" {
		return ""
	}
	return Secret(env(name))
}

// resolveKey reads a model's key from its file, its variable, or the
// default variable.
func resolveKey(keyEnv, keyFile, defaultEnv string, env func(string) string) Secret {
	if keyEnv == "" {
		keyEnv = defaultEnv
	}
	return secretFrom(keyEnv, keyFile, env)
}
