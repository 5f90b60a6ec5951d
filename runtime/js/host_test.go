package js

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

// call is one host call a fake host saw.
type call struct {
	Name string
	Args string
}

// fakeHost answers calls from a table (by call name) and records them.
// A missing entry answers {}.
type fakeHost struct {
	mu      sync.Mutex
	answers map[string]string
	errs    map[string]error
	block   map[string]bool // calls that wait for ctx
	calls   []call
}

func newFakeHost() *fakeHost {
	return &fakeHost{answers: map[string]string{}, errs: map[string]error{}, block: map[string]bool{}}
}

func (h *fakeHost) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	h.mu.Lock()
	h.calls = append(h.calls, call{name, string(args)})
	answer, err, block := h.answers[name], h.errs[name], h.block[name]
	h.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	if answer == "" {
		answer = "{}"
	}
	return json.RawMessage(answer), nil
}

func (h *fakeHost) recorded() []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]call(nil), h.calls...)
}

// script builds a script source around a run body.
func script(body string) string {
	return `module.exports = {
  name: "t", description: "a test script",
  params: { user: { description: "who", default: "test" } },
  run(vm, params) {
` + body + `
  },
};
`
}

func mustLoad(t testing.TB, src string, opts ...Options) *Module {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	m, err := Load("scripts/t.js", []byte(src), o)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return m
}

// runWith runs a module against a host with a fixed clock and seed.
func runWith(t testing.TB, m *Module, host runtime.Host, mutate ...func(*runtime.Run)) (runtime.Result, error) {
	t.Helper()
	r := runtime.Run{
		Host:   host,
		Params: map[string]string{},
		VMID:   101,
		Seed:   42,
		Clock:  time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
	for _, f := range mutate {
		f(&r)
	}
	return m.Run(context.Background(), r)
}

func contains(t testing.TB, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Fatalf("%q does not contain %q", got, want)
	}
}
