// Package config reads poligon's one TOML file and the environment
// variables that override it, and checks the result. A broken config is a
// list of problems, each naming the key at fault; `poligon config check`
// prints them and the server refuses to start on them.
package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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

	// Planner writes stand plans (stand_plan); Stands bounds them.
	Planner Planner `toml:"planner"`
	Stands  Stands  `toml:"stands"`

	// Source names where each overridden value came from (for config check).
	Source map[string]string `toml:"-"`
	// File is the config file read, "" when none.
	File string `toml:"-"`

	fileBenches bool    // the file lists benches: no implicit local bench
	envProblems []error // variables that could not be read
}

// Bench is one place to run VMs: the local QEMU backend or a Proxmox VE
// cluster.
type Bench struct {
	Name string `toml:"name"`
	Type string `toml:"type"` // qemu | pve
	// Description tells people and agents what the bench is for.
	Description string `toml:"description"`

	// qemu
	DataDir string `toml:"data_dir"` // default: the top-level data_dir
	Accel   string `toml:"accel"`    // auto | kvm | tcg; default: the top-level accel

	// pve
	API       string `toml:"api"`        // https://host:8006/api2/json
	Token     Secret `toml:"token"`      // stdio mode only; over HTTP each request carries X-PVE-Token
	CAFile    string `toml:"ca_file"`    // else SSL_CERT_FILE / SSL_CERT_DIR / the system store
	BackendID string `toml:"backend_id"` // aliases of one cluster share caches and locks
	Storage   string `toml:"storage"`

	// pikvm, bmc (megarac: a bmc of that dialect): one physical machine.
	// api is the controller's https:// URL; the password (and a TOTP
	// secret) come from an environment variable or a file, never from here.
	User         string `toml:"user"`
	PasswordEnv  string `toml:"password_env"`
	PasswordFile string `toml:"password_file"`
	TOTPEnv      string `toml:"totp_env"`   // pikvm with 2FA: the TOTP secret
	TOTPFile     string `toml:"totp_file"`  //
	PinSHA256    string `toml:"pin_sha256"` // the controller's certificate, when no CA signs it
	Dialect      string `toml:"dialect"`    // bmc: redfish (default), megarac, idrac, supermicro
	// Rental: tools need the caller's lease (bench_lease).
	Rental bool `toml:"rental"`
	// KeyEnv names the variable holding the bench key (X-Bench-Key over
	// HTTP; POLIGON_MCP_COMMON_KEY serves every bench without one).
	KeyEnv string `toml:"key_env"`
	// Allow is what the operator allows on the machine: hid (keyboard and
	// mouse), power, media. Default: hid only.
	Allow []string `toml:"allow"`
	// DryRun: power and media actions (and HID input) are logged and
	// skipped. Approval: "" none, "confirm" (confirm=true), "ask" (the
	// human through MCP elicitation; confirm=true where the client cannot).
	DryRun   bool   `toml:"dry_run"`
	Approval string `toml:"approval"`

	Password Secret `toml:"-"`
	TOTP     Secret `toml:"-"`
	Key      Secret `toml:"-"`
}

// Physical reports whether the bench is one physical machine.
func (b Bench) Physical() bool { return b.Type == "pikvm" || b.Type == "bmc" || b.Type == "megarac" }

// Storage is a place install images live: a named NFS/CIFS share, an HTTP
// mirror or an ISO pool (storage_list; bench_media's source).
type Storage struct {
	Name        string `toml:"name"`
	Type        string `toml:"type"` // nfs | cifs | http | iso-pool
	Address     string `toml:"address"`
	User        string `toml:"user"`
	Description string `toml:"description"`
}

// Token maps an HTTP bearer token to an owner (local benches). Give the
// token's SHA-256 (hex) rather than the token itself where you can.
type Token struct {
	Owner  string `toml:"owner"`
	Token  Secret `toml:"token"`
	SHA256 string `toml:"sha256"`
}

// Server configures `poligon serve`.
// Toolsets are the tool families a server can offer.
var Toolsets = []string{"vm", "ui", "iso", "stand", "bench", "dataset", "scripts"}

type Server struct {
	Bind         string   `toml:"bind"`          // default 127.0.0.1:8811
	AllowedHosts []string `toml:"allowed_hosts"` // Host values accepted besides loopback; "*" any
	// Toolsets are the tool families offered: vm, ui, iso, stand, bench,
	// dataset, scripts; empty: every family the benches can serve.
	Toolsets []string `toml:"toolsets"`
}

// Limits bound what calls may ask for.
type Limits struct {
	MaxWait        Duration `toml:"max_wait"`         // cap of every wait; default 50s
	BusyWait       Duration `toml:"busy_wait"`        // wait for a busy VM; default 30s
	ScriptTimeout  Duration `toml:"script_timeout"`   // default 10m
	ScriptMemoryMB int      `toml:"script_memory_mb"` // default 256
	ShutdownGrace  Duration `toml:"shutdown_grace"`   // calls in flight may finish; default 90s
}

// OCR configures screen reading by tesseract.
type OCR struct {
	Languages string `toml:"languages"` // tesseract's form; default rus+eng
	Workers   int    `toml:"workers"`   // engines; default: the CPUs, at most 4
	Disabled  bool   `toml:"disabled"`
}

// Model is an OpenAI-compatible chat/completions endpoint.
type Model struct {
	API    string `toml:"api"`    // the full chat/completions URL
	Model  string `toml:"model"`  // default qwen3.8-27b
	Coords string `toml:"coords"` // pixels (of the image sent; default) | permille
	// Resize: how the frame is resized before it is sent: none (default),
	// qwen25 (Qwen2.5-VL's smart_resize, factor 28) or qwen3 (factor 32).
	Resize    string   `toml:"resize"`
	MaxPixels int      `toml:"max_pixels"` // overrides the resize preset's
	MaxTokens int      `toml:"max_tokens"`
	Options   string   `toml:"options"` // a JSON object merged into each request body
	Timeout   Duration `toml:"timeout"` // per call; default 120s
	// The key is never written in this file: KeyEnv names the environment
	// variable that holds it (default PV_AI_KEY, PV_AI_GROUND_KEY), or
	// KeyFile a file (a mounted secret).
	KeyEnv  string `toml:"key_env"`
	KeyFile string `toml:"key_file"`
	// SeeAlways (vision only): every screenshot answer carries the element
	// list too.
	SeeAlways bool `toml:"see_always"`

	Key Secret `toml:"-"` // resolved from KeyEnv or KeyFile
}

// Configured reports whether the endpoint is set.
func (m Model) Configured() bool { return m.API != "" }

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

// Events records model failures as data (POLIGON_MCP_EVENTS).
type Events struct {
	Dir     string `toml:"dir"`     // model-events.jsonl goes here; "" = off
	Samples bool   `toml:"samples"` // also the frame and the raw answer (screen content!)
	MaxMB   int    `toml:"max_mb"`  // rotate past this; default 64
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

// applyEnv lets environment variables override the file, keeping the
// manual's names where they exist.
func (c *Config) applyEnv(env func(string) string) {
	set := func(name string, dst *string) {
		if v := env(name); v != "" {
			*dst = v
			c.Source[name] = "env"
		}
	}
	set("POLIGON_OWNER", &c.Owner)
	set("POLIGON_DATA", &c.DataDir)
	set("POLIGON_MCP_EVIDENCE", &c.EvidenceDir)
	set("POLIGON_MCP_SCENARIOS", &c.ScriptsDir)
	set("POLIGON_MCP_AUDIT", &c.AuditLog)
	set("POLIGON_STATE", &c.StateDir)
	set("POLIGON_LOG_LEVEL", &c.LogLevel)
	set("POLIGON_LOG_FORMAT", &c.LogFormat)
	set("POLIGON_MCP_DUMP", &c.Dump)
	c.envBool(env, "POLIGON_MCP_LOG_PAYLOAD", &c.LogPayload)
	set("POLIGON_ACCEL", &c.Accel)
	set("POLIGON_MCP_BIND", &c.Server.Bind)
	set("POLIGON_DEFAULT_BENCH", &c.DefaultBench)
	list := func(name string, dst *[]string) { // comma-separated; replaces the file's
		if v := env(name); v != "" {
			*dst = nil
			for _, x := range strings.Split(v, ",") {
				if x = strings.TrimSpace(x); x != "" {
					*dst = append(*dst, x)
				}
			}
			c.Source[name] = "env"
		}
	}
	list("POLIGON_MCP_ALLOWED_HOSTS", &c.Server.AllowedHosts)
	list("POLIGON_MCP_TOOLSETS", &c.Server.Toolsets)
	c.applyModelEnv(env)
	c.applyBenchEnv(env)
	if v := env("PVE_API"); v != "" {
		// The manual's single-cluster setup: PVE_API (+ PVE_TOKEN in stdio mode)
		// adds a bench named pve.
		b := Bench{Name: "pve", Type: "pve", API: v, Token: Secret(env("PVE_TOKEN")), BackendID: env("POLIGON_MCP_BACKEND_ID")}
		c.Benches = append(c.Benches, b)
		c.Source["PVE_API"] = "env"
	}
}

// applyModelEnv reads the manual's PV_AI_* and event variables.
func (c *Config) applyModelEnv(env func(string) string) {
	set := func(name string, dst *string) {
		if v := env(name); v != "" {
			*dst = v
			c.Source[name] = "env"
		}
	}
	set("PV_AI_API", &c.Vision.API)
	set("PV_AI_MODEL", &c.Vision.Model)
	set("PV_AI_COORDS", &c.Vision.Coords)
	set("PV_AI_OPTIONS", &c.Vision.Options)
	set("PV_AI_GROUND_API", &c.Grounding.API)
	set("PV_AI_GROUND_MODEL", &c.Grounding.Model)
	set("PV_AI_GROUND_COORDS", &c.Grounding.Coords)
	set("PV_AI_PLAN_API", &c.Planner.API)
	set("PV_AI_PLAN_MODEL", &c.Planner.Model)
	set("PV_AI_PLAN_OPTIONS", &c.Planner.Options)
	set("POLIGON_OCR_LANGUAGES", &c.OCR.Languages)
	set("POLIGON_MCP_EVENTS", &c.Events.Dir)
	c.envBool(env, "POLIGON_MCP_SEE_ALWAYS", &c.Vision.SeeAlways)
	c.envBool(env, "POLIGON_MCP_EVENT_SAMPLES", &c.Events.Samples)
	if v := env("POLIGON_MCP_EVENTS_MAX_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			n = -1 // Check reports it
		}
		c.Events.MaxMB = n
		c.Source["POLIGON_MCP_EVENTS_MAX_MB"] = "env"
	}
	c.Vision.Key = resolveKey(c.Vision, "PV_AI_KEY", env)
	c.Grounding.Key = resolveKey(c.Grounding, "PV_AI_GROUND_KEY", env)
	c.Planner.Key = resolveKey(Model{KeyEnv: c.Planner.KeyEnv, KeyFile: c.Planner.KeyFile}, "PV_AI_PLAN_KEY", env)
}

// decodeEnvArray reads the JSON array of variable name into out. A key out
// does not know is refused by name, as the file's unknown keys are: dropped
// silently, a pin_sha256 or an allow would not do what its operator wrote.
// envBool is the one reading of a boolean variable: 1, true, yes or on, or
// 0, false, no or off, in any case; unset leaves the setting as the file
// has it, and anything else is a problem naming the variable (the setting
// stays as it was).
func (c *Config) envBool(env func(string) string, name string, dst *bool) {
	switch v := env(name); strings.ToLower(strings.TrimSpace(v)) {
	case "":
		return
	case "1", "true", "yes", "on":
		*dst = true
	case "0", "false", "no", "off":
		*dst = false
	default:
		c.envProblems = append(c.envProblems, fmt.Errorf("%s=%q is not a boolean: say 1, true, yes or on, or 0, false, no or off", name, v))
		return
	}
	c.Source[name] = "env"
}

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

// applyBenchEnv reads the manual's POLIGON_MCP_STANDS and
// POLIGON_MCP_STORAGES (JSON arrays) and resolves the physical benches'
// secrets from their variables and files.
func (c *Config) applyBenchEnv(env func(string) string) {
	if v := env("POLIGON_MCP_STANDS"); v != "" {
		var stands []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			API         string `json:"api"`
			Token       string `json:"token"` // pve: the API token; pikvm, megarac: user:password
			BackendID   string `json:"backend_id"`
			Description string `json:"description"`
			Rental      bool   `json:"rental"`
		}
		if err := decodeEnvArray("POLIGON_MCP_STANDS", v, &stands, "{name, type, api, token?, backend_id?, description?, rental?}"); err != nil {
			c.envProblems = append(c.envProblems, err)
			stands = nil
		}
		for _, st := range stands {
			b := Bench{Name: st.Name, Type: st.Type, API: st.API, BackendID: st.BackendID, Description: st.Description, Rental: st.Rental}
			if b.Type == "pve" {
				b.Token = Secret(st.Token)
			} else if user, pw, ok := strings.Cut(st.Token, ":"); ok {
				b.User, b.Password = user, Secret(pw)
			}
			c.Benches = append(c.Benches, b)
		}
		c.fileBenches = c.fileBenches || len(stands) > 0
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
	c.envBool(env, "POLIGON_DRY_RUN", &c.DryRun)
	common := Secret(env("POLIGON_MCP_COMMON_KEY"))
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

// secretFrom reads a secret from a variable or a file (Check reports a
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

// resolveKey reads a model's key from its variable or file; a file that
// cannot be read is Check's problem to report.
func resolveKey(m Model, defaultEnv string, env func(string) string) Secret {
	if m.KeyFile != "" {
		b, err := os.ReadFile(m.KeyFile)
		if err != nil {
			return ""
		}
		return Secret(strings.TrimSpace(string(b)))
	}
	name := m.KeyEnv
	if name == "" {
		name = defaultEnv
	}
	return Secret(env(name))
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
	if c.Server.Bind == "" {
		c.Server.Bind = "127.0.0.1:8811"
	}
	if !c.fileBenches {
		// No benches in the file: the embedded default, plus PVE_API's if set.
		c.Benches = append([]Bench{{Name: "local", Type: "qemu", Description: "QEMU on this machine"}}, c.Benches...)
	}
	for i := range c.Benches {
		b := &c.Benches[i]
		if b.Type == "qemu" && b.DataDir == "" {
			b.DataDir = c.DataDir
		}
		if b.Type == "qemu" && b.Accel == "" {
			b.Accel = c.Accel
		}
		if b.Type == "megarac" { // the manual's name for a MegaRAC BMC
			b.Type, b.Dialect = "bmc", "megarac"
		}
		if b.Type == "bmc" && b.Dialect == "" {
			b.Dialect = "redfish"
		}
		if b.Physical() && b.Allow == nil {
			b.Allow = []string{"hid"}
		}
		if b.Physical() && c.DryRun {
			b.DryRun = true
		}
	}
	if c.DefaultBench == "" {
		c.DefaultBench = c.Benches[len(c.Benches)-1].Name // PVE_API's bench when set
		if c.fileBenches {
			c.DefaultBench = c.Benches[0].Name
		}
	}
	c.applyModelDefaults()
	l := &c.Limits
	def := func(d *Duration, v time.Duration) {
		if d.Duration == 0 {
			d.Duration = v
		}
	}
	def(&l.MaxWait, 50*time.Second)
	def(&l.BusyWait, 30*time.Second)
	def(&l.ScriptTimeout, 10*time.Minute)
	def(&l.ShutdownGrace, 90*time.Second)
	if l.ScriptMemoryMB == 0 {
		l.ScriptMemoryMB = 256
	}
}

func (c *Config) applyModelDefaults() {
	if c.OCR.Languages == "" {
		c.OCR.Languages = "rus+eng"
	}
	v, g := &c.Vision, &c.Grounding
	if v.Configured() && v.Model == "" {
		v.Model = "qwen3.8-27b"
	}
	// A grounding model named without an endpoint is served by the vision
	// endpoint, with the vision key.
	if !g.Configured() && (g.Model != "" || g.Coords != "") && v.Configured() {
		g.API = v.API
		if g.Key == "" {
			g.Key = v.Key
		}
		if g.Model == "" {
			g.Model = v.Model
		}
	}
	if g.Configured() && g.Model == "" {
		g.Model = v.Model
	}
	for _, m := range []*Model{v, g} {
		if m.Coords == "" {
			m.Coords = "pixels"
		}
		if m.Resize == "" {
			m.Resize = "none"
		}
		if m.Timeout.Duration == 0 {
			m.Timeout.Duration = 120 * time.Second
		}
	}
	if c.Events.MaxMB == 0 {
		c.Events.MaxMB = 64
	}
	// The planner defaults to the vision endpoint and key, each on its own
	// (the manual's PV_AI_PLAN_API / PV_AI_PLAN_KEY); a key named by
	// key_env or key_file is that key or none.
	p := &c.Planner
	if p.API == "" {
		p.API = v.API
	}
	if p.Key == "" && p.KeyEnv == "" && p.KeyFile == "" {
		p.Key = v.Key
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

func xdg(env, fallback, name string) string {
	base := os.Getenv(env)
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, fallback)
	}
	return filepath.Join(base, name)
}

var (
	benchName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	backendID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Check answers every problem with the config, each naming its key.
func (c *Config) Check() []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	names := map[string]bool{}
	for i, b := range c.Benches {
		where := fmt.Sprintf("bench[%d]", i)
		if b.Name != "" {
			where = fmt.Sprintf("bench %q", b.Name)
		}
		switch {
		case !benchName.MatchString(b.Name):
			bad("%s: name must match %s", where, benchName)
		case names[b.Name]:
			bad("%s: the name is used twice", where)
		}
		names[b.Name] = true
		switch b.Type {
		case "qemu":
			if b.API != "" || b.Token != "" {
				bad("%s: api and token are for type pve", where)
			}
			// An inherited bad value is the top-level accel's problem.
			if !validAccel(b.Accel) && b.Accel != c.Accel {
				bad("%s: accel %q: use auto, kvm or tcg", where, b.Accel)
			}
		case "pve":
			if b.Accel != "" {
				bad("%s: accel is for type qemu", where)
			}
			if !strings.HasPrefix(b.API, "https://") {
				bad("%s: api must be an https:// URL of the PVE API (got %q)", where, b.API)
			}
			if b.Token != "" && !strings.Contains(b.Token.Reveal(), "!") {
				bad("%s: token must look like user@realm!tokenid=secret", where)
			}
			if b.BackendID != "" && !backendID.MatchString(b.BackendID) {
				bad("%s: backend_id uses ASCII letters, digits, ., _ and - (at most 64 bytes)", where)
			}
			if b.CAFile != "" {
				if _, err := os.Stat(b.CAFile); err != nil {
					bad("%s: ca_file: %v", where, err)
				}
			}
		case "pikvm", "bmc":
			problems = append(problems, checkPhysical(where, b)...)
		default:
			bad("%s: type must be qemu, pve, pikvm, bmc or megarac (got %q)", where, b.Type)
		}
	}
	if !names[c.DefaultBench] {
		bad("default_bench %q is not a configured bench", c.DefaultBench)
	}
	for i, t := range c.Tokens {
		where := fmt.Sprintf("token[%d]", i)
		if t.Owner == "" || sanitize(t.Owner) != t.Owner {
			bad("%s: owner must be lowercase letters and digits (got %q)", where, t.Owner)
		}
		switch {
		case t.Token == "" && t.SHA256 == "":
			bad("%s: set token or sha256", where)
		case t.Token != "" && t.SHA256 != "":
			bad("%s: set token or sha256, not both", where)
		case t.SHA256 != "" && !hexSHA256.MatchString(t.SHA256):
			bad("%s: sha256 must be 64 lowercase hex digits", where)
		case t.Token != "" && len(t.Token) < 16:
			bad("%s: token is shorter than 16 characters", where)
		}
	}
	if sanitize(c.Owner) == "" {
		bad("owner %q has no letters or digits: set owner in the config", c.Owner)
	}
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
	if _, _, err := net.SplitHostPort(c.Server.Bind); err != nil {
		bad("server.bind %q: %v", c.Server.Bind, err)
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
	for _, t := range c.Server.Toolsets {
		if !slices.Contains(Toolsets, t) {
			bad("server.toolsets: unknown toolset %q: use %s", t, strings.Join(Toolsets, ", "))
		}
	}
	if !validAccel(c.Accel) {
		bad("accel %q: use auto, kvm or tcg", c.Accel)
	}
	if c.Limits.MaxWait.Duration <= 0 || c.Limits.MaxWait.Duration > 10*time.Minute {
		bad("limits.max_wait %s: between 1s and 10m", c.Limits.MaxWait.Duration)
	}
	if c.Limits.ScriptMemoryMB < 16 {
		bad("limits.script_memory_mb %d: at least 16", c.Limits.ScriptMemoryMB)
	}
	problems = append(problems, c.checkEyes()...)
	problems = append(problems, c.envProblems...)
	names = map[string]bool{}
	for i, st := range c.Storages {
		where := fmt.Sprintf("storage[%d]", i)
		switch {
		case !benchName.MatchString(st.Name):
			bad("%s: name must match %s", where, benchName)
		case names[st.Name]:
			bad("storage %q: the name is used twice", st.Name)
		}
		names[st.Name] = true
		switch st.Type {
		case "nfs", "cifs", "http", "iso-pool":
		default:
			bad("storage %q: type must be nfs, cifs, http or iso-pool (got %q)", st.Name, st.Type)
		}
		if st.Type == "http" && !strings.HasPrefix(st.Address, "http://") && !strings.HasPrefix(st.Address, "https://") {
			bad("storage %q: an http storage's address is an http(s):// URL", st.Name)
		}
	}
	return problems
}

var pinSHA256 = regexp.MustCompile(`^([0-9a-fA-F]{2}:?){31}[0-9a-fA-F]{2}$`)

// checkPhysical checks a pikvm or bmc bench. Problems name the key at
// fault, never a secret's value.
func checkPhysical(where string, b Bench) []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if !strings.HasPrefix(b.API, "https://") {
		bad("%s: api must be the controller's https:// URL", where)
	}
	if b.User == "" {
		bad("%s: user is missing", where)
	}
	switch {
	case b.PasswordFile != "":
		if _, err := os.ReadFile(b.PasswordFile); err != nil {
			bad("%s: password_file: %v", where, err)
		}
	case b.Password == "" && b.PasswordEnv != "":
		bad("%s: the variable %s (password_env) is empty", where, b.PasswordEnv)
	case b.Password == "":
		bad("%s: no password: set password_env or password_file", where)
	}
	if b.TOTPFile != "" {
		if _, err := os.ReadFile(b.TOTPFile); err != nil {
			bad("%s: totp_file: %v", where, err)
		}
	}
	if b.PinSHA256 != "" && !pinSHA256.MatchString(b.PinSHA256) {
		bad("%s: pin_sha256 is the certificate's SHA-256: 64 hex digits (colons allowed)", where)
	}
	if b.CAFile != "" {
		if _, err := os.Stat(b.CAFile); err != nil {
			bad("%s: ca_file: %v", where, err)
		}
	}
	for _, a := range b.Allow {
		if a != "hid" && a != "power" && a != "media" {
			bad("%s: allow %q: use hid, power and media", where, a)
		}
	}
	switch b.Approval {
	case "", "confirm", "ask":
	default:
		bad("%s: approval %q: use confirm or ask (or leave it out)", where, b.Approval)
	}
	if b.Type == "bmc" {
		switch b.Dialect {
		case "redfish", "megarac", "ami", "idrac", "dell", "supermicro":
		default:
			bad("%s: dialect %q: use redfish, megarac, idrac or supermicro", where, b.Dialect)
		}
	} else if b.Dialect != "" {
		bad("%s: dialect is for type bmc", where)
	}
	if b.Accel != "" || b.DataDir != "" {
		bad("%s: accel and data_dir are for type qemu", where)
	}
	return problems
}

var ocrLanguages = regexp.MustCompile(`^[a-z_]+(\+[a-z_]+)*$`)

// checkEyes checks the OCR, model and event settings. The model clients
// check their endpoints again when they are made (the same rules).
func (c *Config) checkEyes() []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if !ocrLanguages.MatchString(c.OCR.Languages) {
		bad("ocr.languages %q: tesseract language codes joined by +, e.g. rus+eng", c.OCR.Languages)
	}
	if c.OCR.Workers < 0 || c.OCR.Workers > 16 {
		bad("ocr.workers %d: between 1 and 16 (0: the CPUs, at most 4)", c.OCR.Workers)
	}
	for _, m := range []struct {
		name string
		m    Model
	}{{"vision", c.Vision}, {"grounding", c.Grounding}} {
		if !m.m.Configured() {
			continue
		}
		if !strings.HasPrefix(m.m.API, "https://") && !strings.HasPrefix(m.m.API, "http://") {
			bad("%s.api must be an http(s) URL of a chat/completions endpoint", m.name)
		}
		if m.m.Coords != "pixels" && m.m.Coords != "permille" {
			bad("%s.coords %q: use pixels or permille", m.name, m.m.Coords)
		}
		switch m.m.Resize {
		case "none", "qwen25", "qwen3":
		default:
			bad("%s.resize %q: use none, qwen25 or qwen3", m.name, m.m.Resize)
		}
		if m.m.Options != "" {
			var obj map[string]any
			if err := json.Unmarshal([]byte(m.m.Options), &obj); err != nil || obj == nil {
				bad("%s.options must be a JSON object (got %.40q)", m.name, m.m.Options)
			}
		}
		if m.m.KeyFile != "" {
			if _, err := os.ReadFile(m.m.KeyFile); err != nil {
				bad("%s.key_file: %v", m.name, err)
			}
		}
	}
	problems = append(problems, c.checkPlanner()...)
	if c.Vision.SeeAlways && !c.Vision.Configured() {
		bad("vision.see_always (POLIGON_MCP_SEE_ALWAYS) needs a vision model: set vision.api (PV_AI_API) and its key")
	}
	if c.Events.MaxMB < 0 {
		bad("events.max_mb (POLIGON_MCP_EVENTS_MAX_MB) must be a positive number of MB")
	}
	if c.Events.Dir != "" {
		if fi, err := os.Stat(c.Events.Dir); err != nil || !fi.IsDir() {
			bad("events.dir %q is not a directory", c.Events.Dir)
		}
	}
	return problems
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

// validAccel: the accelerators a qemu bench can ask for (the qemu
// backend's ResolveAccel takes the same; config stays a leaf).
func validAccel(s string) bool { return s == "auto" || s == "kvm" || s == "tcg" }

// Bench answers the bench called name ("" = the default).
func (c *Config) Bench(name string) (Bench, bool) {
	if name == "" {
		name = c.DefaultBench
	}
	for _, b := range c.Benches {
		if b.Name == name {
			return b, true
		}
	}
	return Bench{}, false
}

// OwnerOfToken answers the owner an HTTP bearer token maps to. Tokens are
// compared by their SHA-256 in constant time.
func (c *Config) OwnerOfToken(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	for _, t := range c.Tokens {
		want := t.SHA256
		if t.Token != "" {
			s := sha256.Sum256([]byte(t.Token.Reveal()))
			want = hex.EncodeToString(s[:])
		}
		w, err := hex.DecodeString(want)
		if err == nil && subtle.ConstantTimeCompare(w, sum[:]) == 1 {
			return t.Owner, true
		}
	}
	return "", false
}

// sanitize is hostapi.SanitizeOwner, repeated here to keep config a leaf.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Port answers the port of server.bind.
func (c *Config) Port() int {
	_, p, _ := net.SplitHostPort(c.Server.Bind)
	n, _ := strconv.Atoi(p)
	return n
}
