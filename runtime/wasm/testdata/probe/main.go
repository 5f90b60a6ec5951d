// Command probe is a test guest: its mode param picks a behaviour the
// runtime/wasm tests observe.
package main

import (
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"time"

	"github.com/poligon/poligon/stdlib/go/poligon"
)

func init() {
	poligon.Register(poligon.Script{
		Name:        "probe",
		Description: "A test guest; mode picks what it does.",
		Params:      []poligon.Param{{Name: "mode", Description: "what to do"}},
		Timeout:     90 * time.Second,
		Recipes:     []poligon.RecipeCall{{Name: "login", Params: []string{"user"}}},
		Run:         run,
	})
}

func main() {}

var modes = map[string]func(vm *poligon.VM) (any, error){
	"verbs":    verbs,
	"catch":    catch,
	"uncaught": uncaught,
	"spin":     spin,
	"grow":     grow,
	"block":    block,
	"entropy":  entropy,
	"print":    print,
	"big":      big,
	"panic":    func(*poligon.VM) (any, error) { panic("boom") },
	"crash":    crash,
	"vmid":     func(vm *poligon.VM) (any, error) { return vm.ID(), nil },
	"sandbox":  sandbox,
}

func run(vm *poligon.VM, params map[string]string) (any, error) {
	f, ok := modes[params["mode"]]
	if !ok {
		return nil, fmt.Errorf("unknown mode %q", params["mode"])
	}
	return f(vm)
}

// verbs calls every verb once and answers what it decoded.
func verbs(vm *poligon.VM) (any, error) {
	var out []any
	keep := func(v any, err error) {
		if err != nil {
			out = append(out, "error: "+err.Error())
			return
		}
		out = append(out, v)
	}
	keep(vm.Exec("ls /", poligon.ExecOpts{Timeout: 5}))
	keep(vm.Expect("uname", poligon.ExpectOpts{Contains: "Linux"}))
	stdout, ok, err := vm.Check("test -f /x")
	keep([]any{stdout, ok}, err)
	keep(vm.Run("make", poligon.RunOpts{Wait: 10, Restart: true}))
	keep(vm.WaitBoot(poligon.WaitBootOpts{Timeout: 30}))
	keep(vm.ExecGUI("xterm", poligon.ExecGUIOpts{User: "alice"}))
	keep(vm.ReadFile("/etc/hostname", poligon.ReadFileOpts{Offset: 2, Max: 10}))
	keep(nil, vm.WriteFile("/tmp/a", "hello"))
	keep(nil, vm.WriteFile("/tmp/b", "\xff\x00"))
	shot, err := vm.Screen().Shot()
	keep(shot, err)
	keep(vm.Screen().WaitStill(poligon.WaitStillOpts{Seconds: 1.5, Timeout: 9}))
	keep(vm.Screen().WaitChange(poligon.WaitChangeOpts{Timeout: 4}))
	keep(vm.Screen().WaitWindow("Firefox", poligon.WaitWindowOpts{Gone: true, Timeout: 7, User: "bob"}))
	keep(nil, vm.Keyboard().Type("hi"))
	keep(nil, vm.Keyboard().Press("ctrl-c"))
	keep(nil, vm.Mouse().Click(1, 2, poligon.ClickOpts{Button: "right", Count: 2}))
	keep(nil, vm.Mouse().DoubleClick(3, 4))
	keep(nil, vm.Mouse().Drag(5, 6, 7, 8))
	keep(nil, vm.Mouse().Move(9, 10))
	keep(nil, vm.Power().Start(poligon.PowerOpts{Wait: 11}))
	keep(nil, vm.Power().Stop())
	keep(nil, vm.Power().Snapshot("clean"))
	keep(nil, vm.Power().Rollback("clean", poligon.PowerOpts{Wait: 12}))
	keep(vm.SaveShot("shots/a.png", shot))
	keep(nil, vm.Log("step"))
	keep(vm.Recipe("login", map[string]string{"user": "test"}))
	keep(nil, vm.Sleep(0.5))
	return out, nil
}

// catch catches a failed expect and answers what it saw.
func catch(vm *poligon.VM) (any, error) {
	_, err := vm.Expect("false")
	var perr *poligon.Error
	if !errors.As(err, &perr) {
		return nil, fmt.Errorf("want a *poligon.Error, got %v", err)
	}
	return map[string]string{"call": perr.Call, "message": perr.Message, "hint": perr.Hint}, nil
}

// uncaught fails the run with a host error, wrapped.
func uncaught(vm *poligon.VM) (any, error) {
	if _, err := vm.Expect("false"); err != nil {
		return nil, fmt.Errorf("step one: %w", err)
	}
	return "unreachable", nil
}

func spin(*poligon.VM) (any, error) {
	for {
	}
}

var hoard [][]byte

// grow keeps allocating until the memory cap stops it.
func grow(*poligon.VM) (any, error) {
	for {
		b := make([]byte, 1<<20)
		b[0] = 1
		hoard = append(hoard, b)
	}
}

// block waits in a host call the test host never answers.
func block(vm *poligon.VM) (any, error) {
	err := vm.Sleep(600)
	return "slept", err
}

// entropy logs what a script could use to tell runs apart.
func entropy(vm *poligon.VM) (any, error) {
	start := time.Now()
	time.Sleep(20 * time.Millisecond)
	slept := time.Since(start)
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	m := map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true}
	order := ""
	for k := range m {
		order += fmt.Sprint(k)
	}
	facts := []string{
		"now " + start.UTC().Format(time.RFC3339Nano),
		fmt.Sprint("slept ", slept >= 20*time.Millisecond),
		fmt.Sprint("rand ", rand.Int64()),
		"crypto " + hex.EncodeToString(b),
		"maporder " + order,
	}
	for _, f := range facts {
		if err := vm.Log(f); err != nil {
			return nil, err
		}
	}
	return facts, nil
}

func print(*poligon.VM) (any, error) {
	fmt.Println("to stdout")
	fmt.Fprintln(os.Stderr, "to stderr")
	fmt.Print("unterminated")
	return "printed", nil
}

// big answers the length of a large answer.
func big(vm *poligon.VM) (any, error) {
	r, err := vm.Exec("big")
	return len(r.Stdout), err
}

// crash panics in another goroutine, which no recover in Run can catch.
func crash(*poligon.VM) (any, error) {
	go func() { panic("in a goroutine") }()
	for {
		goruntime.Gosched()
	}
}

// sandbox answers what of the host the guest can see.
func sandbox(*poligon.VM) (any, error) {
	_, readErr := os.ReadFile("/etc/passwd")
	_, dirErr := os.ReadDir(".")
	return map[string]any{
		"read":    readErr != nil,
		"readdir": dirErr != nil,
		"env":     len(os.Environ()),
		"args":    len(os.Args),
	}, nil
}
