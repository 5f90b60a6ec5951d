package wasm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/poligon/poligon/runtime"
)

// guestDir holds the guests built in this test binary's run.
var guestDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "poligon-wasm-guests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	guestDir = dir
	code := m.Run()
	if sharedEngine != nil {
		sharedEngine.Close(context.Background())
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

type guestBuild struct {
	once sync.Once
	path string
	err  error
}

var (
	guestsMu sync.Mutex
	guests   = map[string]*guestBuild{}
)

// guestWasm builds testdata/<name> as a wasip1 reactor, once per test run,
// and answers its bytes. It skips when there is no go toolchain.
func guestWasm(tb testing.TB, name string) []byte {
	tb.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("the go toolchain is not on PATH: cannot build the wasm test guests")
	}
	guestsMu.Lock()
	g := guests[name]
	if g == nil {
		g = &guestBuild{}
		guests[name] = g
	}
	guestsMu.Unlock()
	g.once.Do(func() {
		g.path = filepath.Join(guestDir, name+".wasm")
		cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", g.path, "./testdata/"+name)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			g.err = fmt.Errorf("build guest %s: %v\n%s", name, err, out)
		}
	})
	if g.err != nil {
		tb.Fatal(g.err)
	}
	b, err := os.ReadFile(g.path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func newTestEngine(tb testing.TB, opts Options) *Engine {
	tb.Helper()
	e, err := NewEngine(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// sharedEngine is one engine for the tests that only run guests, so each
// guest compiles once per test binary.
var (
	sharedOnce    sync.Once
	sharedEngine  *Engine
	sharedModules sync.Map // guest name -> *Module
)

func loadGuest(tb testing.TB, name string) *Module {
	tb.Helper()
	wasm := guestWasm(tb, name)
	sharedOnce.Do(func() {
		var err error
		if sharedEngine, err = NewEngine(context.Background(), Options{}); err != nil {
			tb.Fatal(err)
		}
	})
	if m, ok := sharedModules.Load(name); ok {
		return m.(*Module)
	}
	m, err := sharedEngine.Load(context.Background(), name+".wasm", wasm)
	if err != nil {
		tb.Fatal(err)
	}
	sharedModules.Store(name, m)
	return m
}

// call is one host call a guest made.
type call struct {
	Name string
	Args string
}

// fakeHost answers calls from a table (default: {}) and records them.
type fakeHost struct {
	mu      sync.Mutex
	answers map[string]func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
	calls   []call
}

func newFakeHost() *fakeHost {
	return &fakeHost{answers: map[string]func(context.Context, json.RawMessage) (json.RawMessage, error){}}
}

// answer sets a fixed JSON answer for name.
func (h *fakeHost) answer(name, answerJSON string) {
	h.answers[name] = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(answerJSON), nil
	}
}

// fail makes name fail with err.
func (h *fakeHost) fail(name string, err error) {
	h.answers[name] = func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, err }
}

func (h *fakeHost) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	h.mu.Lock()
	h.calls = append(h.calls, call{name, string(args)})
	f := h.answers[name]
	h.mu.Unlock()
	if f == nil {
		return json.RawMessage("{}"), nil
	}
	return f(ctx, args)
}

func (h *fakeHost) recorded() []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]call(nil), h.calls...)
}

// logLines collects a run's log.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) log(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// runProbe runs the probe guest in mode.
func runProbe(t *testing.T, ctx context.Context, host runtime.Host, mode string, limits runtime.Limits) (runtime.Result, error) {
	t.Helper()
	return loadGuest(t, "probe").Run(ctx, runtime.Run{
		Host:   host,
		Params: map[string]string{"mode": mode},
		VMID:   101,
		Limits: limits,
	})
}
