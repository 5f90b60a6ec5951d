// Package config reads poligon's one TOML file and the environment
// variables that override it, and checks the result. A broken config is a
// list of problems, each naming the key at fault; `poligon config check`
// prints them and the server refuses to start on them.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/poligon/poligon/internal/redact"
)

// Config is the effective configuration.
type Config struct {
	// Owner is the owner name over stdio (and for `poligon run`); default
	// the OS user. Over HTTP the credential decides.
	Owner       string `toml:"owner"`
	DataDir     string `toml:"data_dir"`     // the local backend's templates, ISOs and VMs
	EvidenceDir string `toml:"evidence_dir"` // screenshots' path= goes here; "" refuses path
	ScriptsDir  string `toml:"scripts_dir"`  // extra scripts, watched
	AuditLog    string `toml:"audit_log"`    // JSON lines; "-" = stderr, "" = off
	StateDir    string `toml:"state_dir"`    // transcripts, the Wasm compilation cache
	LogLevel    string `toml:"log_level"`    // debug, info, warn, error
	// LogFormat is how log lines are written: logfmt (default), json or
	// text (slog's own key=value, for a terminal).
	LogFormat string `toml:"log_format"`
	// LogPayload adds the full text of a failed call (guest output, model
	// answers, server bodies) at debug; the error line stops before it.
	LogPayload bool `toml:"log_payload"`
	// Dump records the raw RFB bytes of console sessions to this file (for
	// test fixtures); "" records nothing.
	Dump string `toml:"dump"`
	// Accel is the qemu benches' accelerator unless a bench sets its own:
	// auto (KVM when a probe guest runs under it, else TCG), kvm or tcg.
	Accel string `toml:"accel"`

	DefaultBench string    `toml:"default_bench"`
	Benches      []Bench   `toml:"bench"`
	Storages     []Storage `toml:"storage"`
	// DryRun makes every physical bench a dry run.
	DryRun bool    `toml:"dry_run"`
	Tokens []Token `toml:"token"`

	Server Server `toml:"server"`
	Limits Limits `toml:"limits"`

	// Eyes: OCR, the vision model (ui_see) and the grounding model
	// (ui_click_label's last resort; default: the vision model).
	OCR       OCR    `toml:"ocr"`
	Vision    Model  `toml:"vision"`
	Grounding Model  `toml:"grounding"`
	Events    Events `toml:"events"`

	// Trace bounds the record of every call on a machine.
	Trace Trace `toml:"trace"`

	// Planner writes stand plans (stand_plan); Stands bounds them.
	Planner Planner `toml:"planner"`
	Stands  Stands  `toml:"stands"`

	// Dataset captures every console frame as training material.
	Dataset Dataset `toml:"dataset"`

	// Source names where each overridden value came from (for config check).
	Source map[string]string `toml:"-"`
	// File is the config file read, "" when none.
	File string `toml:"-"`

	fileBenches bool    // the file lists benches: no implicit local bench
	envProblems []error // variables that could not be read
}

// Secret is a string that never prints (internal/redact's).
type Secret = redact.Secret

// Duration is a time.Duration written as "30s" or "10m".
type Duration struct{ time.Duration }

// UnmarshalText parses "30s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration like 30s or 10m", b)
	}
	d.Duration = v
	return nil
}

// MarshalText prints "30s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// DefaultPath is $XDG_CONFIG_HOME/poligon/config.toml.
func DefaultPath() string {
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "poligon", "config.toml")
}

// Load reads path (a missing file at the default path is no error: the
// defaults serve), applies the environment and the defaults, and answers
// the config with every problem found. The config is usable only when
// problems is empty.
func Load(path string, explicit bool, env func(string) string) (*Config, []error) {
	c := &Config{Source: map[string]string{}}
	if env == nil {
		env = os.Getenv
	}
	if path != "" {
		md, err := toml.DecodeFile(path, c)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !explicit:
		case err != nil:
			return c, []error{fmt.Errorf("config %s: %w", path, err)}
		default:
			c.File = path
			c.fileBenches = len(c.Benches) > 0
			if keys := md.Undecoded(); len(keys) > 0 {
				var names []string
				for _, k := range keys {
					names = append(names, k.String())
				}
				return c, []error{fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(names, ", "))}
			}
		}
	}
	c.applyEnv(env)
	c.applyDefaults()
	return c, c.Check()
}

func (c *Config) applyDefaults() {
	if c.Owner == "" {
		if u, err := user.Current(); err == nil {
			c.Owner = u.Username
		}
	}
	if c.DataDir == "" {
		c.DataDir = xdg("XDG_DATA_HOME", ".local/share", "poligon")
	}
	if c.StateDir == "" {
		c.StateDir = xdg("XDG_STATE_HOME", ".local/state", "poligon")
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.LogFormat == "" {
		c.LogFormat = "logfmt"
	}
	if c.Accel == "" {
		c.Accel = "auto"
	}
	c.serverDefaults()
	c.benchDefaults()
	c.eyesDefaults()
	c.standsDefaults()
	c.traceDefaults()
	c.datasetDefaults()
}

func xdg(env, fallback, name string) string {
	base := os.Getenv(env)
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, fallback)
	}
	return filepath.Join(base, name)
}

// Check answers every problem with the config, each naming its key.
func (c *Config) Check() []error {
	problems := append(c.checkBenches(), c.checkServer()...)
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if c.EvidenceDir != "" {
		if fi, err := os.Stat(c.EvidenceDir); err != nil || !fi.IsDir() {
			bad("evidence_dir %q is not a directory", c.EvidenceDir)
		}
	}
	if c.ScriptsDir != "" {
		if fi, err := os.Stat(c.ScriptsDir); err == nil && !fi.IsDir() {
			bad("scripts_dir %q is not a directory", c.ScriptsDir)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level %q: use debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "logfmt", "json", "text":
	default:
		bad("log_format %q: use logfmt, json or text", c.LogFormat)
	}
	if !validAccel(c.Accel) {
		bad("accel %q: use auto, kvm or tcg", c.Accel)
	}
	problems = append(problems, c.checkEyes()...)
	problems = append(problems, c.checkPlanner()...)
	problems = append(problems, c.checkTrace()...)
	problems = append(problems, c.checkDataset()...)
	problems = append(problems, c.envProblems...)
	return problems
}
