package config

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

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

// Events records model failures as data (POLIGON_MCP_EVENTS).
type Events struct {
	Dir     string `toml:"dir"`     // model-events.jsonl goes here; "" = off
	Samples bool   `toml:"samples"` // also the frame and the raw answer (screen content!)
	MaxMB   int    `toml:"max_mb"`  // rotate past this; default 64
}

// eyesDefaults fills the OCR and model settings.
func (c *Config) eyesDefaults() {
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
