package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

func TestUnameExample(t *testing.T) {
	host := newFakeHost()
	host.answer("expect", `{"exit":0,"stdout":"Linux tiny 6.1.0 x86_64\n","stderr":""}`)
	res, err := loadGuest(t, "uname").Run(context.Background(), runtime.Run{Host: host, Params: map[string]string{"flags": "-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Value), `"Linux tiny 6.1.0 x86_64\n"`; got != want {
		t.Errorf("result = %s, want %s", got, want)
	}
	want := []call{{"expect", `{"command":"uname -a"}`}}
	if got := host.recorded(); !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
}

// A Wasm module gets its params' defaults from Manifest.Bind, as a JS one
// does: a run (a recipe call) that leaves flags out runs uname with its
// default "-a"; an undeclared param is refused before anything runs.
func TestParamDefaultsAndUnknownParams(t *testing.T) {
	host := newFakeHost()
	host.answer("expect", `{"exit":0,"stdout":"Linux\n","stderr":""}`)
	m := loadGuest(t, "uname")
	if _, err := m.Run(context.Background(), runtime.Run{Host: host}); err != nil {
		t.Fatal(err)
	}
	want := []call{{"expect", `{"command":"uname -a"}`}}
	if got := host.recorded(); !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	_, err := m.Run(context.Background(), runtime.Run{Host: host, Params: map[string]string{"flgas": "-s"}})
	if err == nil || !strings.Contains(err.Error(), `unknown param "flgas"`) {
		t.Errorf("an undeclared param: %v", err)
	}
	if got := host.recorded(); len(got) != 1 {
		t.Errorf("the refused run made calls: %v", got[1:])
	}
}

func TestEveryVerbMakesItsCall(t *testing.T) {
	host := newFakeHost()
	host.answer("exec", `{"exit":3,"stdout":"bin\n","stderr":"e"}`)
	host.answer("expect", `{"exit":0,"stdout":"Linux\n"}`)
	host.answer("check", `{"ok":true,"exit":0,"stdout":"yes"}`)
	host.answer("run", `{"state":"running","exit":0,"seconds":1.5,"tail":"..."}`)
	host.answer("waitBoot", `{"ok":true,"seconds":2}`)
	host.answer("execGui", `{"running":true,"output":"started"}`)
	host.answer("file.read", `{"base64":"aGVsbG8=","size":12}`)
	host.answer("screen.shot", `{"image":"shot-1","width":800,"height":600,"digest":"ab"}`)
	host.answer("screen.waitStill", `{"ok":true,"seconds":1.5}`)
	host.answer("screen.waitChange", `{"ok":false,"seconds":4}`)
	host.answer("screen.waitWindow", `{"ok":true,"seconds":1,"x":1,"y":2,"w":3,"h":4}`)
	host.answer("evidence.save", `{"path":"shots/a.png"}`)
	host.answer("recipe", `{"logged_in":true}`)

	res, err := runProbe(t, context.Background(), host, "verbs", runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []call{
		{"exec", `{"command":"ls /","timeout":5}`},
		{"expect", `{"command":"uname","contains":"Linux"}`},
		{"check", `{"command":"test -f /x"}`},
		{"run", `{"command":"make","wait":10,"restart":true}`},
		{"waitBoot", `{"timeout":30}`},
		{"execGui", `{"command":"xterm","user":"alice"}`},
		{"file.read", `{"path":"/etc/hostname","offset":2,"max":10}`},
		{"file.write", `{"path":"/tmp/a","text":"hello"}`},
		{"file.write", `{"path":"/tmp/b","base64":"/wA="}`},
		{"screen.shot", `{}`},
		{"screen.waitStill", `{"seconds":1.5,"timeout":9}`},
		{"screen.waitChange", `{"timeout":4}`},
		{"screen.waitWindow", `{"window":"Firefox","gone":true,"timeout":7,"user":"bob"}`},
		{"keyboard.type", `{"text":"hi"}`},
		{"keyboard.press", `{"key":"ctrl-c"}`},
		{"mouse.click", `{"x":1,"y":2,"button":"right","count":2}`},
		{"mouse.doubleClick", `{"x":3,"y":4}`},
		{"mouse.drag", `{"x1":5,"y1":6,"x2":7,"y2":8}`},
		{"mouse.move", `{"x":9,"y":10}`},
		{"power.start", `{"wait":11}`},
		{"power.stop", `{}`},
		{"power.snapshot", `{"name":"clean"}`},
		{"power.rollback", `{"name":"clean","wait":12}`},
		{"evidence.save", `{"path":"shots/a.png","image":"shot-1"}`},
		{"log", `{"message":"step"}`},
		{"recipe", `{"name":"login","params":{"user":"test"}}`},
		{"sleep", `{"seconds":0.5}`},
	}
	got := host.recorded()
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Errorf("call %d: missing, want %v", i, want[i])
		case i >= len(want):
			t.Errorf("call %d: %v, want none", i, got[i])
		case got[i] != want[i]:
			t.Errorf("call %d: %v, want %v", i, got[i], want[i])
		}
	}

	// What the guest decoded from the answers, in call order; null for the
	// calls that answer nothing.
	wantValue := `[{"exit":3,"stdout":"bin\n","stderr":"e"},"Linux\n",["yes",true],` +
		`{"state":"running","exit":0,"seconds":1.5,"tail":"..."},{"ok":true,"seconds":2},` +
		`{"running":true,"output":"started"},"hello",null,null,` +
		`{"image":"shot-1","width":800,"height":600,"digest":"ab"},{"ok":true,"seconds":1.5},` +
		`{"ok":false,"seconds":4},{"ok":true,"seconds":1,"x":1,"y":2,"w":3,"h":4},` +
		`null,null,null,null,null,null,null,null,null,null,"shots/a.png",null,{"logged_in":true},null]`
	if string(res.Value) != wantValue {
		t.Errorf("decoded answers =\n%s\nwant\n%s", res.Value, wantValue)
	}
}

func TestHostErrorReachesTheGuestWithItsHint(t *testing.T) {
	host := newFakeHost()
	host.fail("expect", &runtime.HostError{Call: "expect", Message: "expect: false exited 1", Hint: "check the command"})
	res, err := runProbe(t, context.Background(), host, "catch", runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"call":"expect","hint":"check the command","message":"expect: false exited 1"}`
	if string(res.Value) != want {
		t.Errorf("caught = %s, want %s", res.Value, want)
	}
}

func TestUncaughtHostErrorFailsTheRun(t *testing.T) {
	hostErr := &runtime.HostError{Call: "expect", Message: "expect: false exited 1", Hint: "check the command"}
	host := newFakeHost()
	host.fail("expect", hostErr)
	_, err := runProbe(t, context.Background(), host, "uncaught", runtime.Limits{})
	var se *runtime.ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *runtime.ScriptError", err)
	}
	if se.Script != "probe" || se.Message != "step one: expect: false exited 1" || se.Hint != "check the command" {
		t.Errorf("ScriptError = %+v", se)
	}
	if !errors.Is(err, hostErr) {
		t.Errorf("err does not wrap the host's own error: %#v", se.Err)
	}

	// A plain Go error from the host reaches the script without a hint.
	plain := errors.New("vm 101 is not yours")
	host.fail("expect", plain)
	_, err = runProbe(t, context.Background(), host, "uncaught", runtime.Limits{})
	if !errors.As(err, &se) || se.Hint != "" || !errors.Is(err, plain) {
		t.Errorf("err = %#v, want a ScriptError wrapping the plain error", err)
	}
}

func TestGuestPanicFailsTheRun(t *testing.T) {
	var log logLines
	_, err := loadGuest(t, "probe").Run(context.Background(), runtime.Run{
		Host: newFakeHost(), Params: map[string]string{"mode": "panic"}, Log: log.log,
	})
	var se *runtime.ScriptError
	if !errors.As(err, &se) || se.Message != "panic: boom" {
		t.Fatalf("err = %v, want a ScriptError 'panic: boom'", err)
	}
	if !strings.HasPrefix(se.Where, "main.go:") {
		t.Errorf("Where = %q, want the probe's main.go:line", se.Where)
	}
	if lines := strings.Join(log.all(), "\n"); !strings.Contains(lines, "main.run") {
		t.Errorf("the panic's stack is not in the log:\n%s", lines)
	}
}

func TestGuestCrashFailsTheRun(t *testing.T) {
	_, err := runProbe(t, context.Background(), newFakeHost(), "crash", runtime.Limits{})
	var se *runtime.ScriptError
	if !errors.As(err, &se) || se.Message != "script probe crashed: panic: in a goroutine" {
		t.Fatalf("err = %v, want a crash naming the goroutine's panic", err)
	}
}

func TestSpinningGuestStopsAtItsTimeLimit(t *testing.T) {
	_, err := runProbe(t, context.Background(), newFakeHost(), "spin", runtime.Limits{Timeout: time.Second})
	var se *runtime.ScriptError
	if !errors.As(err, &se) || !errors.Is(err, runtime.ErrTimeout) {
		t.Fatalf("err = %v, want a ScriptError wrapping ErrTimeout", err)
	}
	if !strings.Contains(se.Message, "time limit of 1s") {
		t.Errorf("message %q does not name the limit", se.Message)
	}
}

func TestGrowingGuestStopsAtItsMemoryLimit(t *testing.T) {
	var log logLines
	m := loadGuest(t, "probe")
	_, err := m.Run(context.Background(), runtime.Run{
		Host: newFakeHost(), Params: map[string]string{"mode": "grow"}, Log: log.log,
		Limits: runtime.Limits{MemoryMB: 32},
	})
	var se *runtime.ScriptError
	if !errors.As(err, &se) || !errors.Is(err, runtime.ErrMemory) {
		t.Fatalf("err = %v, want a ScriptError wrapping ErrMemory", err)
	}
	if se.Message != "script probe ran out of memory: its limit is 32 MiB" {
		t.Errorf("message = %q", se.Message)
	}
	if lines := strings.Join(log.all(), "\n"); !strings.Contains(lines, "out of memory") {
		t.Errorf("the guest's own report is not in the log:\n%s", lines)
	}

	// The host survives and runs the next script.
	host := newFakeHost()
	host.answer("expect", `{"stdout":"ok"}`)
	if _, err := runProbe(t, context.Background(), host, "uncaught", runtime.Limits{}); err != nil {
		t.Errorf("a run after the memory failure failed: %v", err)
	}

	// A limit below what the module starts with fails before it runs.
	_, err = m.Run(context.Background(), runtime.Run{Host: host, Params: map[string]string{"mode": "vmid"}, Limits: runtime.Limits{MemoryMB: 1}})
	if !errors.Is(err, runtime.ErrMemory) || !strings.Contains(err.Error(), "of memory to start, more than its limit of 1 MiB") {
		t.Errorf("err = %v, want ErrMemory for a 1 MiB limit", err)
	}
}

func TestCancelDuringAHostCallEndsTheRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	host := newFakeHost()
	entered := make(chan struct{})
	host.answers["sleep"] = func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		close(entered)
		<-ctx.Done() // a host that watches its context, as the contract asks
		return nil, ctx.Err()
	}
	go func() {
		<-entered
		cancel()
	}()
	_, err := runProbe(t, ctx, host, "block", runtime.Limits{})
	var se *runtime.ScriptError
	if !errors.As(err, &se) || !errors.Is(err, runtime.ErrCancelled) {
		t.Fatalf("err = %v, want a ScriptError wrapping ErrCancelled", err)
	}
}

func TestRunsAreDeterministic(t *testing.T) {
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	run := func(seed int64) []call {
		host := newFakeHost()
		_, err := loadGuest(t, "probe").Run(context.Background(), runtime.Run{
			Host: host, Params: map[string]string{"mode": "entropy"}, Seed: seed, Clock: clock,
		})
		if err != nil {
			t.Fatal(err)
		}
		return host.recorded()
	}
	first, second, other := run(7), run(7), run(8)
	if !reflect.DeepEqual(first, second) {
		t.Errorf("two runs with one seed and clock differ:\n%v\n%v", first, second)
	}
	if reflect.DeepEqual(first, other) {
		t.Errorf("runs with different seeds made the same calls: %v", first)
	}
	if !strings.HasPrefix(first[0].Args, `{"message":"now 2026-03-01T12:00:00.`) {
		t.Errorf("the guest's clock does not start at the run's: %s", first[0].Args)
	}
	if first[1].Args != `{"message":"slept true"}` {
		t.Errorf("time.Sleep did not advance the guest's clock: %s", first[1].Args)
	}
}

func TestGuestOutputGoesToTheLog(t *testing.T) {
	var log logLines
	res, err := loadGuest(t, "probe").Run(context.Background(), runtime.Run{
		Host: newFakeHost(), Params: map[string]string{"mode": "print"}, Log: log.log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Value) != `"printed"` {
		t.Errorf("result = %s", res.Value)
	}
	want := []string{"to stdout", "to stderr", "unterminated"}
	if got := log.all(); !reflect.DeepEqual(got, want) {
		t.Errorf("log = %q, want %q", got, want)
	}
}

func TestLargeAnswerIsCollected(t *testing.T) {
	big := strings.Repeat("x", 200<<10) // past the SDK's 64 KiB buffer
	host := newFakeHost()
	answer, _ := json.Marshal(map[string]any{"exit": 0, "stdout": big})
	host.answer("exec", string(answer))
	res, err := runProbe(t, context.Background(), host, "big", runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Value) != "204800" {
		t.Errorf("the guest saw %s bytes of stdout, want 204800", res.Value)
	}
}

func TestVMIDReachesTheGuest(t *testing.T) {
	res, err := runProbe(t, context.Background(), newFakeHost(), "vmid", runtime.Limits{})
	if err != nil || string(res.Value) != "101" {
		t.Errorf("vmid run = %s, %v; want 101", res.Value, err)
	}
}

func TestGuestSeesNoFilesEnvOrArgs(t *testing.T) {
	res, err := runProbe(t, context.Background(), newFakeHost(), "sandbox", runtime.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"args":0,"env":0,"read":true,"readdir":true}`; string(res.Value) != want {
		t.Errorf("the guest sees %s, want %s", res.Value, want)
	}
}
