package wasm

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/runtime"
)

func TestLoadReadsTheManifest(t *testing.T) {
	m := loadGuest(t, "uname")
	flags := "-a"
	want := runtime.Manifest{
		Name:        "uname",
		Description: "Print the kernel name, release and machine of the VM (uname).",
		Params:      []runtime.Param{{Name: "flags", Description: "flags for uname", Default: &flags}},
		Tool:        true,
	}
	if got := m.Manifest(); !reflect.DeepEqual(got, want) {
		t.Errorf("manifest = %+v, want %+v", got, want)
	}

	probe := loadGuest(t, "probe").Manifest()
	if probe.Timeout != 90*time.Second {
		t.Errorf("probe timeout = %s, want 1m30s", probe.Timeout)
	}
	wantRecipes := []runtime.RecipeCall{{Name: "login", Params: []string{"user"}}}
	if !reflect.DeepEqual(probe.Recipes, wantRecipes) {
		t.Errorf("probe recipes = %+v, want %+v", probe.Recipes, wantRecipes)
	}
	if len(probe.Params) != 1 || probe.Params[0].Default != nil {
		t.Errorf("probe params = %+v, want one required param", probe.Params)
	}
}

func TestLoadRefusesAnInvalidManifest(t *testing.T) {
	e := newTestEngine(t, Options{})
	for _, tc := range []struct {
		name, envelope, want string
	}{
		{"bad name", `{"abi":1,"value":{"name":"Bad-Name","description":"x","params":[],"tool":true}}`, `invalid manifest: name "Bad-Name" must match`},
		{"reserved param", `{"abi":1,"value":{"name":"ok","description":"x","params":[{"name":"vmid"}]}}`, `invalid manifest: param "vmid"`},
		{"other abi", `{"abi":2,"value":{}}`, "script other abi speaks ABI 2, this poligon speaks 1"},
		{"failing manifest", `{"abi":1,"error":{"message":"no script registered"}}`, "the manifest failed: no script registered"},
		{"no envelope", `hello`, "broke the poligon ABI: manifest answered no envelope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Load(context.Background(), tc.name, tinyScript(tc.envelope))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLoadRunsAScriptWithoutTheGoSDK(t *testing.T) {
	e := newTestEngine(t, Options{})
	m, err := e.Load(context.Background(), "tiny", tinyScript(`{"abi":1,"value":{"name":"tiny","description":"x","params":[],"tool":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if man := m.Manifest(); man.Name != "tiny" || !man.Tool {
		t.Errorf("manifest = %+v", man)
	}
	// Its run answers the same envelope: the manifest is its result.
	res, err := m.Run(context.Background(), runtime.Run{Host: newFakeHost()})
	if err != nil || !strings.Contains(string(res.Value), `"name":"tiny"`) {
		t.Errorf("run = %s, %v", res.Value, err)
	}
}

func TestLoadRefusesWhatIsNotAScript(t *testing.T) {
	e := newTestEngine(t, Options{})
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"garbage", []byte("not wasm at all"), "compile garbage"},
		{"empty module", []byte("\x00asm\x01\x00\x00\x00"), "is not a poligon Wasm script: it does not export _initialize"},
		{"foreign import", wasmImporting("env", "f"), "it imports env.f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Load(context.Background(), tc.name, tc.wasm)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want %q", err, tc.want)
			}
		})
	}
}

// wasmImporting is a minimal module importing one func () -> () from mod.
func wasmImporting(mod, name string) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, 1, 4, 1, 0x60, 0, 0) // type section: one func type () -> ()
	imp := []byte{1, byte(len(mod))}
	imp = append(imp, mod...)
	imp = append(imp, byte(len(name)))
	imp = append(imp, name...)
	imp = append(imp, 0, 0) // func of type 0
	b = append(b, 2, byte(len(imp)))
	return append(b, imp...)
}

func TestModuleRunsConcurrently(t *testing.T) {
	m := loadGuest(t, "uname")
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			host := newFakeHost()
			host.answer("expect", `{"exit":0,"stdout":"Linux `+string(rune('a'+i))+`\n"}`)
			res, err := m.Run(context.Background(), runtime.Run{Host: host, Params: map[string]string{"flags": "-s"}})
			if err == nil && string(res.Value) != `"Linux `+string(rune('a'+i))+`\n"` {
				err = &runtime.ScriptError{Message: "run " + string(rune('a'+i)) + " answered " + string(res.Value)}
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
