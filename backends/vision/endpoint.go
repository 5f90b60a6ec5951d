package vision

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"
)

// Purposes, coordinate conventions and resize presets an Endpoint accepts.
const (
	PurposeVision    = "vision"
	PurposeGrounding = "grounding"
	PurposePlanner   = "planner" // text only: Chat

	CoordsPixels   = "pixels"   // pixels of the image sent
	CoordsPermille = "permille" // 0-1000 of the image sent

	ResizeNone   = "none"
	ResizeQwen25 = "qwen25"
	ResizeQwen3  = "qwen3"
)

// PromptVersion changes whenever a prompt or the parsing of its answer
// changes; an element cache keys on it (with the model and the sent size) so
// a new prompt never serves lists made by the old one.
const PromptVersion = 1

// Endpoint is one model the client calls.
type Endpoint struct {
	Purpose   string          // "vision" | "grounding": names its log lines, metrics and events
	URL       string          // the full chat/completions URL
	Key       string          // bearer key; never in a log, error, event or sample
	Model     string          // the model name sent in the body
	Coords    string          // "pixels" (of the image sent, the default) | "permille" (0-1000 of the image sent)
	Resize    string          // "none" (default) | "qwen25" (smart_resize f=28, max 12845056) | "qwen3" (f=32, max 16777216)
	MaxPixels int             // overrides the preset's max_pixels when > 0 (e.g. 1003520 for the Holo1.5 cookbook)
	Options   json.RawMessage // a JSON object merged into the body; nil: the purpose's defaults
	MaxTokens int             // default 2000 (vision), 256 (grounding); Options may override it
	Timeout   time.Duration   // per call, default 120 s
}

// preset is a smart_resize configuration (Qwen2-VL image processor).
type preset struct{ factor, minPixels, maxPixels int }

var presets = map[string]preset{
	// HF Qwen2/2.5-VL image processor defaults: min 56*56, max 28*28*16384.
	ResizeQwen25: {28, 56 * 56, 16384 * 28 * 28},
	// Qwen3-VL / Holo2 (hai-cookbook): min 64*32*32, max 16384*32*32.
	ResizeQwen3: {32, 64 * 32 * 32, 16384 * 32 * 32},
}

const (
	defaultTimeout         = 120 * time.Second
	defaultVisionTokens    = 2000
	defaultGroundingTokens = 256
	defaultPlannerTokens   = 3000 // a 4-machine plan is ~1000 tokens; thinking needs far more (raise it then)
)

var (
	defaultVisionOptions    = json.RawMessage(`{"temperature":0.1,"repetition_penalty":1.05}`)
	defaultGroundingOptions = json.RawMessage(`{"temperature":0}`)
	defaultPlannerOptions   = json.RawMessage(`{"temperature":0.1,"max_tokens":3000}`)
)

// Check says what is wrong with the endpoint's settings, all at once, or nil.
// It never quotes the URL or the key (either may hold a secret).
func (e Endpoint) Check() error {
	var bad []string
	name := "model"
	switch e.Purpose {
	case PurposeVision, PurposeGrounding, PurposePlanner:
		name = e.Purpose
	default:
		bad = append(bad, fmt.Sprintf("purpose %q: want vision, grounding or planner", e.Purpose))
	}
	u, err := url.Parse(e.URL)
	switch {
	case e.URL == "":
		bad = append(bad, "URL is empty: want the full http(s)://.../chat/completions URL")
	case err != nil:
		bad = append(bad, "URL does not parse: want the full http(s)://.../chat/completions URL")
	case u.Scheme != "http" && u.Scheme != "https":
		bad = append(bad, fmt.Sprintf("URL scheme %q: want http or https", u.Scheme))
	case u.Host == "":
		bad = append(bad, "URL has no host")
	case u.User != nil:
		bad = append(bad, "URL carries credentials: give the key as the key setting instead")
	}
	if strings.TrimSpace(e.Model) == "" {
		bad = append(bad, "model is empty")
	}
	switch e.Coords {
	case "", CoordsPixels, CoordsPermille:
	default:
		bad = append(bad, fmt.Sprintf("coords %q: want pixels or permille", e.Coords))
	}
	switch e.Resize {
	case "", ResizeNone:
		if e.MaxPixels > 0 {
			bad = append(bad, "max_pixels needs resize qwen25 or qwen3")
		}
	case ResizeQwen25, ResizeQwen3:
		if p := presets[e.Resize]; e.MaxPixels > 0 && e.MaxPixels < p.minPixels {
			bad = append(bad, fmt.Sprintf("max_pixels %d is below the %s min_pixels %d", e.MaxPixels, e.Resize, p.minPixels))
		}
	default:
		bad = append(bad, fmt.Sprintf("resize %q: want none, qwen25 or qwen3", e.Resize))
	}
	if e.MaxPixels < 0 {
		bad = append(bad, "max_pixels is negative")
	}
	if e.MaxTokens < 0 {
		bad = append(bad, "max_tokens is negative")
	}
	if e.Timeout < 0 {
		bad = append(bad, "timeout is negative")
	}
	if strings.ContainsFunc(e.Key, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
		bad = append(bad, "key contains spaces or control characters (a stray newline from a file?)")
	}
	if _, err := optionFields(e.Options); err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s endpoint: %s", name, strings.Join(bad, "; "))
	}
	return nil
}

// optionFields decodes Options into its top-level fields (nil for none).
func optionFields(raw json.RawMessage) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, errors.New(`options must be a JSON object, e.g. {"temperature":0.1}`)
	}
	if s, ok := m["stream"]; ok && string(bytes.TrimSpace(s)) != "false" {
		return nil, errors.New("options may not set stream: the client reads one JSON answer")
	}
	return m, nil
}

// withDefaults fills the zero fields of a checked endpoint.
func (e Endpoint) withDefaults() Endpoint {
	if e.Coords == "" {
		e.Coords = CoordsPixels
	}
	if e.Resize == "" {
		e.Resize = ResizeNone
	}
	if e.Timeout == 0 {
		e.Timeout = defaultTimeout
	}
	if e.MaxTokens == 0 {
		switch e.Purpose {
		case PurposeGrounding:
			e.MaxTokens = defaultGroundingTokens
		case PurposePlanner:
			e.MaxTokens = defaultPlannerTokens
		default:
			e.MaxTokens = defaultVisionTokens
		}
	}
	if len(bytes.TrimSpace(e.Options)) == 0 {
		switch e.Purpose {
		case PurposeGrounding:
			e.Options = defaultGroundingOptions
		case PurposePlanner:
			e.Options = defaultPlannerOptions
		default:
			e.Options = defaultVisionOptions
		}
	}
	return e
}

// SendSize answers the size a w x h frame is resized to before it is sent.
func (e Endpoint) SendSize(w, h int) (int, int) {
	p, ok := presets[e.Resize]
	if !ok {
		return w, h
	}
	if e.MaxPixels > 0 {
		p.maxPixels = e.MaxPixels
	}
	sw, sh, err := smartResize(w, h, p.factor, p.minPixels, p.maxPixels)
	if err != nil {
		return w, h // the processor would refuse it too; send it as it is
	}
	return sw, sh
}

// smartResize is the Qwen2-VL image processor's smart_resize (vision.md
// §2.2): both sides multiples of factor, the area within [min, max], the
// aspect ratio kept. Python's round is half-to-even, hence RoundToEven.
func smartResize(w, h, factor, minPixels, maxPixels int) (int, int, error) {
	if w <= 0 || h <= 0 {
		return 0, 0, fmt.Errorf("empty image %dx%d", w, h)
	}
	if float64(max(w, h))/float64(min(w, h)) > 200 {
		return 0, 0, fmt.Errorf("aspect ratio of %dx%d is above 200", w, h)
	}
	f := float64(factor)
	roundBy := func(n float64) int { return max(factor, int(math.RoundToEven(n/f))*factor) }
	floorBy := func(n float64) int { return max(factor, int(math.Floor(n/f))*factor) }
	ceilBy := func(n float64) int { return int(math.Ceil(n/f)) * factor }
	hb, wb := roundBy(float64(h)), roundBy(float64(w))
	if hb*wb > maxPixels {
		beta := math.Sqrt(float64(h) * float64(w) / float64(maxPixels))
		hb, wb = floorBy(float64(h)/beta), floorBy(float64(w)/beta)
	} else if hb*wb < minPixels {
		beta := math.Sqrt(float64(minPixels) / (float64(h) * float64(w)))
		hb, wb = ceilBy(float64(h)*beta), ceilBy(float64(w)*beta)
	}
	return wb, hb, nil
}
