package js

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/poligon/poligon/runtime"
)

func TestParams(t *testing.T) {
	m := mustLoad(t, `module.exports = {name: "p", description: "d",
  params: {user: {default: "test"}, host: {description: "required"}},
  run(vm, p) { return [p.user, p.host, vm.vmid, Object.keys(p)]; }};`)
	res, err := runWith(t, m, newFakeHost(), func(r *runtime.Run) { r.Params = map[string]string{"host": "h1", "vmid": "101"} })
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "params", string(res.Value), `["test","h1",101,["user","host"]]`)

	_, err = runWith(t, m, newFakeHost())
	contains(t, fmt.Sprint(err), `script p: param "host" is required`)
	_, err = runWith(t, m, newFakeHost(), func(r *runtime.Run) { r.Params = map[string]string{"host": "h", "hots": "x"} })
	contains(t, fmt.Sprint(err), `script p: unknown param "hots" (it declares user, host)`)
}

func TestResults(t *testing.T) {
	for body, want := range map[string]string{
		``:                                       `null`,
		`return undefined;`:                      `null`,
		`return () => 1;`:                        `null`,
		`return "text";`:                         `"text"`,
		`return {a: [1, 2.5, null, true]};`:      `{"a":[1,2.5,null,true]}`,
		`return vm.screen.shot();`:               `{}`,
		`return new Map([["a", 1]]);`:            `{}`,
		`return {d: new Date(0), u: undefined};`: `{"d":"1970-01-01T00:00:00.000Z"}`,
	} {
		res, err := runWith(t, mustLoad(t, script(body)), newFakeHost())
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if string(res.Value) != want {
			t.Fatalf("%s answered %s, want %s", body, res.Value, want)
		}
	}
	_, err := runWith(t, mustLoad(t, script(`const a = {}; a.self = a; return a;`)), newFakeHost())
	contains(t, fmt.Sprint(err), "TypeError")
}

// One Module runs concurrently, and re-entrantly: a recipe call whose host
// runs another script (here the same one) on the same goroutine.
func TestConcurrentAndNestedRuns(t *testing.T) {
	m := mustLoad(t, `module.exports = {name: "nest", description: "d", params: {depth: {default: "0"}},
  run(vm, p) {
    const d = Number(p.depth);
    const inner = d < 3 ? vm.recipe("nest", {depth: String(d + 1)}) : "bottom";
    return "depth " + d + " > " + inner + " " + vm.expect("x", {contains: String(d)});
  }};`)
	var host runtime.Host
	host = runtime.HostFunc(func(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
		switch name {
		case "recipe":
			var ra struct {
				Params map[string]string `json:"params"`
			}
			if err := json.Unmarshal(args, &ra); err != nil {
				return nil, err
			}
			res, err := m.Run(ctx, runtime.Run{Host: host, Params: ra.Params})
			return res.Value, err
		case "expect":
			var ea struct{ Contains string }
			_ = json.Unmarshal(args, &ea)
			return json.Marshal(map[string]string{"stdout": "ok" + ea.Contains})
		}
		return nil, fmt.Errorf("unexpected call %s", name)
	})
	want := `"depth 0 > depth 1 > depth 2 > depth 3 > bottom ok3 ok2 ok1 ok0"`
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			res, err := m.Run(context.Background(), runtime.Run{Host: host})
			if err == nil && string(res.Value) != want {
				err = fmt.Errorf("answer %s, want %s", res.Value, want)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
