package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/js"
)

// machine is a fake host answering from a table; it stands for the VM.
type machine struct {
	answers map[string]string
	errs    map[string]error
	seen    []string
}

func (m *machine) Call(_ context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	m.seen = append(m.seen, name+" "+string(args))
	if err := m.errs[name]; err != nil {
		return nil, err
	}
	if a, ok := m.answers[name]; ok {
		return json.RawMessage(a), nil
	}
	return json.RawMessage(`{}`), nil
}

const loginJS = `module.exports = {
  name: "login", description: "log in",
  params: { user: { default: "test" }, password: {} },
  run(vm, p) {
    vm.exec("echo " + p.user + ":" + p.password + " | chpasswd");
    vm.keyboard.type(p.password);
    vm.keyboard.press("ret");
    let note = "";
    try { vm.expect("pgrep -u " + p.user + " gnome-shell"); } catch (e) { note = e.hint; }
    const shot = vm.screen.shot();
    return {shot: shot.image, note, at: new Date().toISOString(), r: Math.random()};
  },
};`

func newMachine() *machine {
	return &machine{
		answers: map[string]string{
			"exec":        `{"exit":0,"stdout":"","stderr":""}`,
			"screen.shot": `{"image":"shot-1","width":800,"height":600,"digest":"abc"}`,
		},
		errs: map[string]error{"expect": &runtime.HostError{Call: "expect", Message: "exit 1", Hint: "is the session up?"}},
	}
}

// redactPassword blanks what keyboard.type typed and the chpasswd line.
func redactPassword(call string, args json.RawMessage) json.RawMessage {
	switch call {
	case "keyboard.type":
		return json.RawMessage(`{"text":"***"}`)
	case "exec":
		if bytes.Contains(args, []byte("chpasswd")) {
			return json.RawMessage(`{"command":"*** | chpasswd"}`)
		}
	}
	return args
}

var (
	clock  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	params = map[string]string{"user": "bob", "password": "hunter2"}
)

func runLogin(t *testing.T, m *js.Module, host runtime.Host) (runtime.Result, error) {
	t.Helper()
	return m.Run(context.Background(), runtime.Run{Host: host, Params: params, VMID: 7, Seed: 3, Clock: clock})
}

func record(t *testing.T, m *js.Module) (string, runtime.Result) {
	t.Helper()
	var buf bytes.Buffer
	h := Header{Script: "scripts/login.js", SHA256: "00", VMID: 7, Params: map[string]string{"user": "bob"}, Seed: 3, Clock: clock}
	rec := NewRecorder(&buf, h, newMachine(), WithRedact(redactPassword))
	res, err := runLogin(t, m, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	return buf.String(), res
}

func loadLogin(t *testing.T) *js.Module {
	t.Helper()
	m, err := js.Load("scripts/login.js", []byte(loginJS), js.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRecordReadReplay(t *testing.T) {
	m := loadLogin(t)
	text, recorded := record(t, m)
	if strings.Contains(text, "hunter2") {
		t.Fatalf("the password reached the transcript:\n%s", text)
	}
	h, entries, err := Read(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if h.Script != "scripts/login.js" || h.VMID != 7 || h.Seed != 3 || !h.Clock.Equal(clock) || h.Params["user"] != "bob" {
		t.Fatalf("header = %+v", h)
	}
	var calls []string
	for i, e := range entries {
		if e.Seq != i+1 || e.Ms < 0 {
			t.Fatalf("entry %d: seq %d ms %v", i, e.Seq, e.Ms)
		}
		calls = append(calls, e.Call)
	}
	if got := strings.Join(calls, " "); got != "exec keyboard.type keyboard.press expect screen.shot" {
		t.Fatalf("calls = %s", got)
	}
	if e := entries[3]; e.Error == nil || e.Error.Message != "exit 1" || e.Error.Hint != "is the session up?" || e.Answer != nil {
		t.Fatalf("the failed call is recorded as %+v", e)
	}

	rep := NewReplayer(entries, WithRedact(redactPassword))
	replayed, err := runLogin(t, m, rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Done(); err != nil {
		t.Fatal(err)
	}
	if string(replayed.Value) != string(recorded.Value) {
		t.Fatalf("replay answered %s, the recorded run %s", replayed.Value, recorded.Value)
	}
}

func TestTamperedTranscriptDiverges(t *testing.T) {
	m := loadLogin(t)
	text, _ := record(t, m)
	tampered := strings.Replace(text, `{"key":"ret"}`, `{"key":"tab"}`, 1)
	if tampered == text {
		t.Fatal("the transcript has no keyboard.press ret line to tamper with")
	}
	_, entries, err := Read(strings.NewReader(tampered))
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReplayer(entries, WithRedact(redactPassword))
	_, err = runLogin(t, m, rep)
	var d *Divergence
	if !errors.As(err, &d) || d.N != 3 {
		t.Fatalf("err = %v, want a divergence at call 3", err)
	}
	want := `transcript diverged at call 3: the script called keyboard.press {"key":"ret"}, the transcript has keyboard.press {"key":"tab"}`
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if done := rep.Done(); !errors.Is(done, d) {
		t.Fatalf("Done = %v, want the divergence", done)
	}
}

func TestReplayLengthMismatch(t *testing.T) {
	m := loadLogin(t)
	text, _ := record(t, m)
	_, entries, err := Read(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	// The transcript is two calls short: the script's 4th call has no answer.
	rep := NewReplayer(entries[:3], WithRedact(redactPassword))
	_, err = runLogin(t, m, rep)
	if err == nil || !strings.Contains(err.Error(), "transcript diverged at call 4: the script called expect") ||
		!strings.Contains(err.Error(), "but the transcript ended after 3 calls") {
		t.Fatalf("err = %v", err)
	}
	// The transcript has one call more than the script makes.
	extra := append(entries, Entry{Seq: 99, Call: "log", Args: json.RawMessage(`{"message":"x"}`)})
	rep = NewReplayer(extra, WithRedact(redactPassword))
	if _, err := runLogin(t, m, rep); err != nil {
		t.Fatal(err)
	}
	if err := rep.Done(); err == nil || !strings.Contains(err.Error(), `the run made 5 of its 6 calls; the next was call 6 log {"message":"x"}`) {
		t.Fatalf("Done = %v", err)
	}
}

// Replaying a redacted transcript needs the same redaction.
func TestReplayWithoutRedactionDiverges(t *testing.T) {
	m := loadLogin(t)
	text, _ := record(t, m)
	_, entries, _ := Read(strings.NewReader(text))
	_, err := runLogin(t, m, NewReplayer(entries))
	if err == nil || !strings.Contains(err.Error(), `diverged at call 1: the script called exec`) ||
		!strings.Contains(err.Error(), `the transcript has exec {"command":"*** | chpasswd"}`) {
		t.Fatalf("err = %v", err)
	}
}

func TestCanonicalArgs(t *testing.T) {
	rep := NewReplayer([]Entry{{Seq: 1, Call: "mouse.click", Args: json.RawMessage(`{ "y": 2, "x": 1 }`), Answer: json.RawMessage(`{}`)}})
	if _, err := rep.Call(context.Background(), "mouse.click", json.RawMessage(`{"x":1,"y":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := rep.Done(); err != nil {
		t.Fatal(err)
	}
}

// A recipe's own calls recorded through the same Recorder carry their depth,
// and a replay answers the recipe call whole.
func TestNestedRecipeCalls(t *testing.T) {
	outer, err := js.Load("scripts/outer.js", []byte(`module.exports = {name: "outer", description: "d",
  run(vm) { vm.log("before"); const r = vm.recipe("inner", {}); vm.log("after " + r); return r; }};`), js.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := js.Load("recipes/inner.js", []byte(`module.exports = {name: "inner", description: "d", tool: false,
  run(vm) { return vm.expect("hostname"); }};`), js.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var rec *Recorder
	base := runtime.HostFunc(func(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
		switch name {
		case "recipe":
			res, err := inner.Run(ctx, runtime.Run{Host: rec})
			return res.Value, err
		case "expect":
			return json.RawMessage(`{"exit":0,"stdout":"vm7","stderr":""}`), nil
		}
		return json.RawMessage(`{}`), nil
	})
	rec = NewRecorder(&buf, Header{Script: "scripts/outer.js"}, base)
	want, err := outer.Run(context.Background(), runtime.Run{Host: rec})
	if err != nil {
		t.Fatal(err)
	}
	_, entries, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, fmt.Sprintf("%d:%s@%d", e.Seq, e.Call, e.Depth))
	}
	if s := strings.Join(got, " "); s != "1:log@0 2:recipe@0 3:expect@1 4:log@0" {
		t.Fatalf("entries = %s", s)
	}
	rep := NewReplayer(entries)
	res, err := outer.Run(context.Background(), runtime.Run{Host: rep})
	if err != nil || string(res.Value) != string(want.Value) {
		t.Fatalf("replay = %s %v, want %s", res.Value, err, want.Value)
	}
	if err := rep.Done(); err != nil {
		t.Fatal(err)
	}
}

func TestReadErrors(t *testing.T) {
	for text, want := range map[string]string{
		"":                              "transcript is empty",
		"not json\n":                    "transcript line 1 (the header)",
		`{"Script":"a"}` + "\n{bad\n":   "transcript line 2",
		`{"Script":"a"}` + "\n{}\n":     "transcript line 2: an entry without a call name",
		`{"Script":"a"}` + "\n\n\n":     "",
		`{"Script":"a"}` + "\n{\"Seq\"": "transcript line 2",
	} {
		_, _, err := Read(strings.NewReader(text))
		if want == "" {
			if err != nil {
				t.Fatalf("%q: %v", text, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%q: err = %v, want %q", text, err, want)
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRecorderWriteErrorDoesNotFailCalls(t *testing.T) {
	rec := NewRecorder(failingWriter{}, Header{}, newMachine())
	if _, err := rec.Call(context.Background(), "exec", json.RawMessage(`{"command":"true"}`)); err != nil {
		t.Fatal(err)
	}
	if err := rec.Err(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Err = %v", err)
	}
}

func TestRecorderPassesOriginalArgs(t *testing.T) {
	m := newMachine()
	var buf bytes.Buffer
	rec := NewRecorder(&buf, Header{}, m, WithRedact(redactPassword))
	if _, err := rec.Call(context.Background(), "keyboard.type", json.RawMessage(`{"text":"hunter2"}`)); err != nil {
		t.Fatal(err)
	}
	if m.seen[0] != `keyboard.type {"text":"hunter2"}` || strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("machine saw %q; transcript %s", m.seen, buf.String())
	}
}
