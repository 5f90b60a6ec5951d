package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/hostapi/calls"
)

// An argument struct declares a tool's input with tags, so the schema the
// client sees and the checks the server makes come from one place:
//
//	VMID int     `json:"vmid" desc:"the VM"`                       // required: no omitempty
//	Wait float64 `json:"wait,omitempty" desc:"..." default:"30" min:"0" max:"max_wait"`
//	Button string `json:"button,omitempty" enum:"left,middle,right" default:"left"`
//
// call:"exec timeout" takes the default of a host call's option from
// calls.Defaults, for a tool that mirrors the call: one table, shown alike
// to agents and scripts. max:"max_wait" (seconds) and max:"max_wait_ms"
// bound a wait by the server's limits.max_wait, which the schema then
// shows (and a default above it comes down to it).
//
// Supported field types: string, bool, int, float64, *bool (a default of
// true), map[string]string (free params), json.RawMessage (any object, for
// the handler to decode). An embedded struct adds its fields: several
// tools share a group of arguments that way.

// param is one property of a tool's input.
type param struct {
	name     string
	kind     string // string, integer, number, boolean, object
	desc     string
	def      any // nil: no default
	min, max *float64
	waitUnit float64 // per second, where max is the server's max_wait (1: seconds, 1000: ms); 0: a fixed max
	enum     []string
	required bool
	raw      bool  // a JSON value the handler decodes itself (json.RawMessage): any object
	index    []int // the field in the struct (through embedded ones); nil for dynamic params
	// capture: a training-dataset label (tag capture:""), listed only by a
	// server that captures; hidden: not listed here, still accepted.
	capture, hidden bool
}

// spec is a tool's input: its parameters in declaration order.
type spec struct {
	params []param
}

// specOf reads the tags of the argument struct type t.
func specOf(t reflect.Type) spec {
	return spec{params: paramsOf(t, nil)}
}

func paramsOf(t reflect.Type, prefix []int) []param {
	var params []param
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		index := append(append([]int{}, prefix...), i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			params = append(params, paramsOf(f.Type, index)...)
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			continue
		}
		p := param{name: name, desc: f.Tag.Get("desc"), index: index, required: !strings.Contains(opts, "omitempty")}
		switch f.Type.Kind() {
		case reflect.String:
			p.kind = "string"
		case reflect.Bool:
			p.kind = "boolean"
		case reflect.Pointer:
			if f.Type.Elem().Kind() != reflect.Bool {
				panic(fmt.Sprintf("%s.%s: only *bool pointers", t, f.Name))
			}
			p.kind = "boolean"
		case reflect.Int, reflect.Int64:
			p.kind = "integer"
		case reflect.Float64:
			p.kind = "number"
		case reflect.Map:
			p.kind = "object"
		case reflect.Slice:
			if f.Type != reflect.TypeFor[json.RawMessage]() {
				panic(fmt.Sprintf("%s.%s: unsupported type %s", t, f.Name, f.Type))
			}
			p.kind, p.raw = "object", true // the handler decodes it (a stand plan)
		default:
			panic(fmt.Sprintf("%s.%s: unsupported type %s", t, f.Name, f.Type))
		}
		if d, ok := f.Tag.Lookup("default"); ok {
			p.def = parseDefault(p.kind, d)
			p.required = false
		}
		if c, ok := f.Tag.Lookup("call"); ok { // the host call's default (calls.Defaults)
			call, option, _ := strings.Cut(c, " ")
			if p.def != nil {
				panic(fmt.Sprintf("%s.%s: a default and a call's default", t, f.Name))
			}
			p.def = parseDefault(p.kind, fmt.Sprint(calls.Default(call, option)))
			p.required = false
		}
		switch f.Tag.Get("max") {
		case "max_wait":
			p.waitUnit = 1
		case "max_wait_ms":
			p.waitUnit = 1000
		}
		for _, b := range []struct {
			tag string
			dst **float64
		}{{"min", &p.min}, {"max", &p.max}} {
			if b.tag == "max" && p.waitUnit > 0 {
				continue
			}
			if v, ok := f.Tag.Lookup(b.tag); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					panic(fmt.Sprintf("%s.%s: %s tag %q", t, f.Name, b.tag, v))
				}
				*b.dst = &n
			}
		}
		if e, ok := f.Tag.Lookup("enum"); ok {
			p.enum = strings.Split(e, ",")
		}
		_, p.capture = f.Tag.Lookup("capture")
		params = append(params, p)
	}
	return params
}

// limits are the server's bounds that a tool's input shows.
type limits struct {
	maxWait time.Duration // limits.max_wait: the longest any wait of a tool call lasts
	// capturing: the server captures the training dataset, so the tools
	// list its labels (intent, app, locale, theme); a server that does not
	// spares every session their bytes, and accepts and ignores them.
	capturing bool
}

// defaultLimits are the ones where none are configured.
var defaultLimits = limits{maxWait: hostapi.DefaultMaxWait}

// within answers the spec with its waits bounded by l.maxWait (their
// maximum, and any default above it), and the dataset's labels hidden
// unless l.capturing.
func (s spec) within(l limits) spec {
	out := spec{params: append([]param{}, s.params...)}
	for i := range out.params {
		p := &out.params[i]
		p.hidden = p.capture && !l.capturing
		if p.waitUnit == 0 {
			continue
		}
		m := math.Floor(l.maxWait.Seconds() * p.waitUnit)
		p.max = &m
		switch d := p.def.(type) {
		case float64:
			p.def = min(d, m)
		case int:
			p.def = min(d, int(m))
		}
	}
	return out
}

func parseDefault(kind, v string) any {
	switch kind {
	case "boolean":
		return v == "true"
	case "integer":
		n, _ := strconv.Atoi(v)
		return n
	case "number":
		n, _ := strconv.ParseFloat(v, 64)
		return n
	}
	return v
}

// shown answers the params a client is shown.
func (s spec) shown() []param {
	return slices.DeleteFunc(append([]param{}, s.params...), func(p param) bool { return p.hidden })
}

// schema renders the JSON Schema of the input, properties sorted by name so
// golden files are stable.
func (s spec) schema() json.RawMessage {
	props := map[string]any{}
	var required []string
	for _, p := range s.params {
		prop := map[string]any{"type": p.kind}
		if p.desc != "" {
			prop["description"] = p.desc
		}
		if p.def != nil {
			prop["default"] = p.def
		}
		if p.min != nil {
			prop["minimum"] = *p.min
		}
		if p.max != nil {
			prop["maximum"] = *p.max
		}
		if len(p.enum) > 0 {
			prop["enum"] = p.enum
		}
		if p.kind == "object" && !p.raw {
			prop["additionalProperties"] = map[string]any{"type": "string"}
		}
		props[p.name] = prop
		if p.required {
			required = append(required, p.name)
		}
	}
	sort.Strings(required)
	out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		out["required"] = required
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// argError is a call with bad arguments: the model reads it and retries.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

// decode checks raw arguments against the spec and fills dst (a pointer to
// the argument struct) with defaults and the given values. Unknown names,
// wrong types, missing required ones and values out of range are refused,
// all named at once.
func (s spec) decode(raw json.RawMessage, dst any) error {
	var given map[string]json.RawMessage
	if len(bytes.TrimSpace(raw)) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &given); err != nil {
			return &argError{"arguments must be a JSON object"}
		}
	}
	v := reflect.ValueOf(dst).Elem()
	known := map[string]bool{}
	var problems []string
	for _, p := range s.params {
		known[p.name] = true
		rawVal, ok := given[p.name]
		if !ok || string(rawVal) == "null" {
			if p.required {
				problems = append(problems, fmt.Sprintf("%s is required", p.name))
			} else if p.def != nil {
				setDefault(v.FieldByIndex(p.index), p.def)
			}
			continue
		}
		f := v.FieldByIndex(p.index)
		if err := json.Unmarshal(rawVal, f.Addr().Interface()); err != nil {
			problems = append(problems, fmt.Sprintf("%s must be %s", p.name, article(p.kind)))
			continue
		}
		if msg := p.check(f); msg != "" {
			problems = append(problems, msg)
		}
	}
	var unknown []string
	for name := range given {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		problems = append(problems, fmt.Sprintf("unknown argument %s", name))
	}
	if len(problems) > 0 {
		return &argError{strings.Join(problems, "; ")}
	}
	return nil
}

func setDefault(f reflect.Value, def any) {
	if f.Kind() == reflect.Pointer {
		b := def.(bool)
		f.Set(reflect.ValueOf(&b))
		return
	}
	f.Set(reflect.ValueOf(def).Convert(f.Type()))
}

// check tests a decoded value against min, max and enum.
func (p param) check(f reflect.Value) string {
	var n float64
	switch f.Kind() {
	case reflect.Int, reflect.Int64:
		n = float64(f.Int())
	case reflect.Float64:
		n = f.Float()
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return fmt.Sprintf("%s must be a finite number", p.name)
		}
	case reflect.String:
		if len(p.enum) > 0 {
			for _, e := range p.enum {
				if f.String() == e {
					return ""
				}
			}
			return fmt.Sprintf("%s must be one of %s (got %q)", p.name, strings.Join(p.enum, ", "), f.String())
		}
		return ""
	default:
		return ""
	}
	if p.min != nil && n < *p.min {
		return fmt.Sprintf("%s must be at least %g (got %g)", p.name, *p.min, n)
	}
	if p.max != nil && n > *p.max {
		return fmt.Sprintf("%s must be at most %g (got %g)", p.name, *p.max, n)
	}
	return ""
}

func article(kind string) string {
	switch kind {
	case "integer":
		return "an integer"
	case "object":
		return "an object of strings"
	}
	return "a " + kind
}
