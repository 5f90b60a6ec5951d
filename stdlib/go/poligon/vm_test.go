package poligon

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/poligon/poligon/hostapi/calls"
)

// recorder is a Caller that records calls and answers from a table.
type recorder struct {
	calls   []string
	answers map[string]string
	err     error
}

func (r *recorder) call(name string, args []byte) ([]byte, error) {
	r.calls = append(r.calls, name+" "+string(args))
	if r.err != nil {
		return nil, r.err
	}
	if a, ok := r.answers[name]; ok {
		return []byte(a), nil
	}
	return []byte("null"), nil
}

func TestVerbsEncodeTheirCalls(t *testing.T) {
	for _, tc := range []struct {
		want string
		do   func(vm *VM) error
	}{
		{`exec {"command":"ls","timeout":3}`, func(vm *VM) error { _, err := vm.Exec("ls", ExecOpts{Timeout: 3}); return err }},
		{`expect {"command":"id","contains":"root"}`, func(vm *VM) error { _, err := vm.Expect("id", ExpectOpts{Contains: "root"}); return err }},
		{`check {"command":"true"}`, func(vm *VM) error { _, _, err := vm.Check("true"); return err }},
		{`run {"command":"make","restart":true}`, func(vm *VM) error { _, err := vm.Run("make", RunOpts{Restart: true}); return err }},
		{`waitBoot {}`, func(vm *VM) error { _, err := vm.WaitBoot(); return err }},
		{`execGui {"command":"xterm"}`, func(vm *VM) error { _, err := vm.ExecGUI("xterm"); return err }},
		{`file.write {"path":"/a","text":"é"}`, func(vm *VM) error { return vm.WriteFile("/a", "é") }},
		{`file.write {"path":"/b","base64":"gA=="}`, func(vm *VM) error { return vm.WriteFile("/b", "\x80") }},
		{`screen.shot {}`, func(vm *VM) error { _, err := vm.Screen().Shot(); return err }},
		{`screen.waitStill {"seconds":2}`, func(vm *VM) error { _, err := vm.Screen().WaitStill(WaitStillOpts{Seconds: 2}); return err }},
		{`screen.waitChange {}`, func(vm *VM) error { _, err := vm.Screen().WaitChange(); return err }},
		{`screen.waitWindow {"window":"Files"}`, func(vm *VM) error { _, err := vm.Screen().WaitWindow("Files"); return err }},
		{`keyboard.type {"text":"a\"b"}`, func(vm *VM) error { return vm.Keyboard().Type(`a"b`) }},
		{`keyboard.press {"key":"ret"}`, func(vm *VM) error { return vm.Keyboard().Press("ret") }},
		{`mouse.click {"x":1,"y":2}`, func(vm *VM) error { return vm.Mouse().Click(1, 2) }},
		{`mouse.doubleClick {"x":1,"y":2}`, func(vm *VM) error { return vm.Mouse().DoubleClick(1, 2) }},
		{`mouse.drag {"x1":1,"y1":2,"x2":3,"y2":4}`, func(vm *VM) error { return vm.Mouse().Drag(1, 2, 3, 4) }},
		{`mouse.move {"x":0,"y":0}`, func(vm *VM) error { return vm.Mouse().Move(0, 0) }},
		{`power.start {}`, func(vm *VM) error { return vm.Power().Start() }},
		{`power.stop {"wait":5}`, func(vm *VM) error { return vm.Power().Stop(PowerOpts{Wait: 5}) }},
		{`power.snapshot {"name":"s"}`, func(vm *VM) error { return vm.Power().Snapshot("s") }},
		{`power.rollback {"name":"s"}`, func(vm *VM) error { return vm.Power().Rollback("s") }},
		{`evidence.save {"path":"a.png"}`, func(vm *VM) error { _, err := vm.SaveShot("a.png"); return err }},
		{`log {"message":"hi"}`, func(vm *VM) error { return vm.Log("hi") }},
		{`recipe {"name":"login"}`, func(vm *VM) error { _, err := vm.Recipe("login", nil); return err }},
		{`sleep {"seconds":1}`, func(vm *VM) error { return vm.Sleep(1) }},
		{`step {"n":1,"of":2,"label":"a"}`, func(vm *VM) error { return vm.Step(1, 2, "a") }},
	} {
		r := &recorder{}
		if err := tc.do(NewVM(1, r.call)); err != nil {
			t.Errorf("%s: %v", tc.want, err)
		}
		if len(r.calls) != 1 || r.calls[0] != tc.want {
			t.Errorf("calls = %q, want %q", r.calls, tc.want)
		}
	}
}

func TestVerbsDecodeTheirAnswers(t *testing.T) {
	r := &recorder{answers: map[string]string{
		calls.Check:    `{"ok":false,"exit":1,"stdout":"no"}`,
		calls.ReadFile: `{"base64":"aGk=","size":2}`,
		calls.Recipe:   `[1,2]`,
	}}
	vm := NewVM(7, r.call)
	if out, ok, err := vm.Check("false"); out != "" || ok || err != nil {
		t.Errorf("Check = %q, %v, %v; want a plain no", out, ok, err)
	}
	if text, err := vm.ReadFile("/x"); text != "hi" || err != nil {
		t.Errorf("ReadFile = %q, %v", text, err)
	}
	if v, err := vm.Recipe("r", map[string]string{"a": "b"}); string(v) != "[1,2]" || err != nil {
		t.Errorf("Recipe = %s, %v", v, err)
	}
	if vm.ID() != 7 {
		t.Errorf("ID = %d", vm.ID())
	}
}

func TestHostErrorTravelsBackWithItsHint(t *testing.T) {
	data := []byte(`{"call":"expect","message":"exit 1","hint":"look","ref":4}`)
	_, err := decodeAnswer("expect", statusError, data)
	var perr *Error
	if !errors.As(err, &perr) || perr.Hint != "look" || perr.ref != 4 {
		t.Fatalf("decodeAnswer = %#v", err)
	}
	env := errorEnvelope(errors.Join(errors.New("while logging in"), err))
	var got answerEnvelope
	if err := json.Unmarshal(env, &got); err != nil {
		t.Fatal(err)
	}
	if got.ABI != abiVersion || got.Error == nil || got.Error.Hint != "look" || got.Error.Ref != 4 || got.Error.Call != "expect" {
		t.Errorf("envelope = %s", env)
	}
	if _, err := decodeAnswer("x", 9, nil); err == nil {
		t.Error("an unknown status decoded")
	}
}

func TestEnvelopesOfTheRegisteredScript(t *testing.T) {
	defer func() { registered = nil }()
	registered = nil
	if env := string(manifestEnvelope()); env != `{"abi":1,"error":{"message":"the module registers no script: call poligon.Register in an init function"}}` {
		t.Errorf("no script: %s", env)
	}
	Register(Script{Name: "t", Description: "d", Run: func(vm *VM, p map[string]string) (any, error) {
		switch p["do"] {
		case "panic":
			panic("boom")
		case "fail":
			return nil, errors.New("nope")
		}
		return map[string]any{"vm": vm.ID(), "p": p}, nil
	}})
	if env := string(manifestEnvelope()); env != `{"abi":1,"value":{"name":"t","description":"d","params":[],"tool":true}}` {
		t.Errorf("manifest: %s", env)
	}
	for params, want := range map[string]string{
		`{"do":"x"}`:    `{"abi":1,"value":{"p":{"do":"x"},"vm":3}}`,
		`{"do":"fail"}`: `{"abi":1,"error":{"message":"nope"}}`,
		`not json`:      `{"abi":1,"error":{"message":"decode params: invalid character 'o' in literal null (expecting 'u')"}}`,
	} {
		if got := string(runEnvelope([]byte(params), 3, nil)); got != want {
			t.Errorf("run %s = %s, want %s", params, got, want)
		}
	}
	var panicked answerEnvelope
	if err := json.Unmarshal(runEnvelope([]byte(`{"do":"panic"}`), 3, nil), &panicked); err != nil {
		t.Fatal(err)
	}
	if panicked.Error == nil || panicked.Error.Message != "panic: boom" || !strings.HasPrefix(panicked.Error.Where, "vm_test.go:") {
		t.Errorf("panic envelope = %+v", panicked.Error)
	}
}
