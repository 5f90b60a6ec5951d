package stand

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestDecode(t *testing.T) {
	p, err := Decode([]byte(`{"name": "web", "notes": "n", "machines": [
  {"role": "a", "template": "tiny", "steps": [{"exec": "ls"}, {"sleep": 5}]},
  {"role": "b", "template": "tiny"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Plan{Name: "web", Notes: "n", Machines: []Machine{
		{Role: "a", Template: "tiny", Steps: []Step{{"exec", json.RawMessage(`"ls"`)}, {"sleep", json.RawMessage(`5`)}}},
		{Role: "b", Template: "tiny"},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("plan = %+v\nwant %+v", p, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		data string
		want Problem
	}{
		{`nope`, Problem{Message: "the plan is not JSON: invalid character 'o' in literal null (expecting 'u') (at byte 2)"}},
		{``, Problem{Message: "the plan is not JSON: unexpected end of JSON input (at byte 0)"}},
		{`{} {}`, Problem{Message: "the plan is not JSON: invalid character '{' after top-level value (at byte 4)"}},
		{`"plan"`, Problem{Message: "the plan must be a JSON object {name, machines, notes}, not a string"}},
		{`{"name": "a", "name": "b"}`, Problem{Message: `the plan must be a JSON object {name, machines, notes}, not an object with the key "name" twice`}},
		{`{"name": 5}`, Problem{Message: "name must be a string, not a number"}},
		{`{"name": null}`, Problem{Message: "name must be a string, not null"}},
		{`{"notes": ["x"]}`, Problem{Message: "notes must be a string, not an array"}},
		{`{"machines": {}}`, Problem{Message: "machines must be an array of {role, template, steps}, not an object"}},
		{`{"machines": [1]}`, Problem{Machine: "#1", Message: "a machine must be an object {role, template, steps}, not a number"}},
		{`{"machines": [{"role": 1}]}`, Problem{Machine: "#1", Message: "role must be a string, not a number"}},
		{`{"machines": [{"role": "a"}, {"role": "b", "template": false}]}`, Problem{Machine: "b", Message: "template must be a string, not a boolean"}},
		{`{"machines": [{"role": "a", "steps": "exec ls"}]}`, Problem{Machine: "a", Message: `steps must be an array of steps like {"exec": "uname -a"}, not a string`}},
		{`{"machines": [{"steps": [{}], "role": "a"}]}`, Problem{Machine: "a", Step: 1, Message: `a step must be an object with exactly one key, the step kind (like {"exec": "uname -a"}); this one is empty`}},
		{`{"machines": [{"role": "a", "steps": [{"exec": "a"}, "ls"]}]}`, Problem{Machine: "a", Step: 2, Message: `a step must be an object with one key, the step kind (like {"exec": "uname -a"}), not a string`}},
		{`{"machines": [{"role": "a", "steps": [{"exec": "a", "exec": "b"}]}]}`, Problem{Machine: "a", Step: 1, Message: `a step must be an object with one key, the step kind (like {"exec": "uname -a"}), not an object with the key "exec" twice`}},
		{`{"machines": [{"role": "Bad", "color": "red"}]}`, Problem{Machine: "#1", Message: `unknown key "color" in a machine (known: role, template, steps)`}},
	} {
		_, err := Decode([]byte(c.data))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("%s: error %v, want a DecodeError", c.data, err)
		}
		if de.Problem != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.data, de.Problem, c.want)
		}
		if err.Error() != c.want.String() {
			t.Errorf("%s: Error() = %q, want the Problem's String()", c.data, err.Error())
		}
	}
}

// A plan survives encoding/json both ways with its steps as written.
func TestStepJSON(t *testing.T) {
	src := `{"name":"web","machines":[{"role":"a","template":"tiny","steps":[{"exec":{"command":"ls","timeout":5}},{"key":"ret"}]}],"notes":"n"}`
	var p Plan
	if err := json.Unmarshal([]byte(src), &p); err != nil {
		t.Fatal(err)
	}
	if p.Machines[0].Steps[0].Kind != "exec" || string(p.Machines[0].Steps[0].Arg) != `{"command":"ls","timeout":5}` {
		t.Fatalf("step = %+v", p.Machines[0].Steps[0])
	}
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != src {
		t.Fatalf("marshal:\n%s\nwant\n%s", out, src)
	}
	if out, _ := json.Marshal(Step{Kind: "screenshot"}); string(out) != `{"screenshot":null}` {
		t.Fatalf("a step without an argument marshals as %s", out)
	}
	if _, err := json.Marshal(Step{Kind: "exec", Arg: json.RawMessage(`{`)}); err == nil {
		t.Fatal("a step with a broken argument marshalled")
	}
	var s Step
	if err := json.Unmarshal([]byte(`{"exec": "a", "sleep": 1}`), &s); err == nil {
		t.Fatal("a step with two kinds unmarshalled")
	}
}
