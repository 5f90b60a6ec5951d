package stand

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// DecodeError is a plan that is not well-formed JSON of the plan's shape.
// It carries the Problem that names where, so Check reports it like any
// other.
type DecodeError struct{ Problem }

func (e *DecodeError) Error() string { return e.Problem.String() }

// Decode reads a plan strictly: it must be one JSON object with only the
// keys name, machines and notes, each machine only role, template and
// steps, each step an object with exactly one key. Step kinds and their
// arguments are Validate's.
func Decode(data []byte) (Plan, error) {
	var p Plan
	if err := syntax(data); err != nil {
		return p, planError("the plan is not JSON: %v", err)
	}
	fields, err := objectFields(data)
	if err != nil {
		return p, planError("the plan must be a JSON object {name, machines, notes}, not %s", err)
	}
	for _, f := range fields {
		switch f.key {
		case "name":
			if err := stringValue(f.val, &p.Name); err != nil {
				return p, planError("name must be a string, not %s", err)
			}
		case "notes":
			if err := stringValue(f.val, &p.Notes); err != nil {
				return p, planError("notes must be a string, not %s", err)
			}
		case "machines":
			items, err := arrayItems(f.val)
			if err != nil {
				return p, planError("machines must be an array of {role, template, steps}, not %s", err)
			}
			p.Machines = make([]Machine, 0, len(items))
			for i, item := range items {
				m, err := decodeMachine(i, item)
				if err != nil {
					return p, err
				}
				p.Machines = append(p.Machines, m)
			}
		default:
			return p, planError("unknown key %q in the plan (known: name, machines, notes)", f.key)
		}
	}
	return p, nil
}

func decodeMachine(i int, raw json.RawMessage) (Machine, error) {
	var m Machine
	fields, err := objectFields(raw)
	if err != nil {
		return m, &DecodeError{Problem{Machine: fmt.Sprintf("#%d", i+1),
			Message: fmt.Sprintf("a machine must be an object {role, template, steps}, not %s", err)}}
	}
	// The role names the machine in every error, so read it first.
	where := fmt.Sprintf("#%d", i+1)
	for _, f := range fields {
		var role string
		if f.key == "role" && stringValue(f.val, &role) == nil && namePattern.MatchString(role) {
			where = role
		}
	}
	fail := func(step int, kind, format string, args ...any) error {
		return &DecodeError{Problem{Machine: where, Step: step, Kind: kind, Message: fmt.Sprintf(format, args...)}}
	}
	for _, f := range fields {
		switch f.key {
		case "role":
			if err := stringValue(f.val, &m.Role); err != nil {
				return m, fail(0, "", "role must be a string, not %s", err)
			}
		case "template":
			if err := stringValue(f.val, &m.Template); err != nil {
				return m, fail(0, "", "template must be a string, not %s", err)
			}
		case "steps":
			items, err := arrayItems(f.val)
			if err != nil {
				return m, fail(0, "", "steps must be an array of steps like {\"exec\": \"uname -a\"}, not %s", err)
			}
			m.Steps = make([]Step, len(items))
			for j, item := range items {
				if err := m.Steps[j].UnmarshalJSON(item); err != nil {
					return m, fail(j+1, "", "%v", err)
				}
			}
		default:
			return m, fail(0, "", "unknown key %q in a machine (known: role, template, steps)", f.key)
		}
	}
	return m, nil
}

func planError(format string, args ...any) error {
	return &DecodeError{Problem{Message: fmt.Sprintf(format, args...)}}
}

// UnmarshalJSON reads {"<kind>": <arg>}: exactly one key.
func (s *Step) UnmarshalJSON(data []byte) error {
	if err := syntax(data); err != nil {
		return err
	}
	fields, err := objectFields(data)
	if err != nil {
		return fmt.Errorf("a step must be an object with one key, the step kind (like {\"exec\": \"uname -a\"}), not %s", err)
	}
	if len(fields) == 0 {
		return errors.New(`a step must be an object with exactly one key, the step kind (like {"exec": "uname -a"}); this one is empty`)
	}
	if len(fields) != 1 {
		keys := make([]string, len(fields))
		for i, f := range fields {
			keys[i] = f.key
		}
		return fmt.Errorf("a step must be an object with exactly one key, the step kind (like {\"exec\": \"uname -a\"}); this one has %d (%s): put each in its own step, and options inside the kind's object",
			len(fields), strings.Join(keys, ", "))
	}
	s.Kind, s.Arg = fields[0].key, fields[0].val
	return nil
}

// MarshalJSON writes {"<kind>": <arg>}, the arg as written.
func (s Step) MarshalJSON() ([]byte, error) {
	kind, err := json.Marshal(s.Kind)
	if err != nil {
		return nil, err
	}
	arg := bytes.TrimSpace(s.Arg)
	if len(arg) == 0 {
		arg = []byte("null")
	} else if !json.Valid(arg) {
		return nil, fmt.Errorf("step %s: its argument is not JSON", s.Kind)
	}
	out := make([]byte, 0, len(kind)+len(arg)+3)
	out = append(out, '{')
	out = append(out, kind...)
	out = append(out, ':')
	out = append(out, arg...)
	return append(out, '}'), nil
}

// field is one key of a JSON object, in the order written.
type field struct {
	key string
	val json.RawMessage
}

// syntax answers why data is not one JSON value, with the byte offset.
func syntax(data []byte) error {
	if json.Valid(data) {
		return nil
	}
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%v (at byte %d)", se, se.Offset)
	}
	if err == nil {
		err = errors.New("invalid JSON")
	}
	return err
}

// objectFields reads a valid JSON object's fields in order; another JSON
// type is an error naming it, and so is a key written twice (JSON would
// keep the last one silently).
func objectFields(raw json.RawMessage) ([]field, error) {
	if t := jsonType(raw); t != "an object" {
		return nil, errors.New(t)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var fields []field
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("an object with the key %q twice", key)
		}
		seen[key] = true
		fields = append(fields, field{key, val})
	}
	return fields, nil
}

// arrayItems reads a valid JSON array's items.
func arrayItems(raw json.RawMessage) ([]json.RawMessage, error) {
	if t := jsonType(raw); t != "an array" {
		return nil, errors.New(t)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	return items, nil
}

// stringValue reads a JSON string; another type is an error naming it.
func stringValue(raw json.RawMessage, out *string) error {
	if t := jsonType(raw); t != "a string" {
		return errors.New(t)
	}
	return json.Unmarshal(raw, out)
}

// jsonType names the type of a valid JSON value as an error says it.
func jsonType(raw json.RawMessage) string {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
