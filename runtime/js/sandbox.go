package js

import (
	_ "embed"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"
)

//go:embed prelude.js
var preludeSource string

//go:embed guards.js
var guardsSource string

// Frames of these files are the sandbox's own: locations skip them.
var (
	preludeProgram = goja.MustCompile("poligon:prelude", preludeSource, true)
	guardsProgram  = goja.MustCompile("poligon:guards", guardsSource, true)
)

// maxCallStack bounds recursion: deeper is an uncatchable error naming it.
const maxCallStack = 4096

// sandbox is a fresh goja runtime with the API installed, not yet bound to
// a run. It is used by exactly one execution and then dropped.
type sandbox struct {
	rt    *goja.Runtime
	owner *execution // set when an execution takes it; the natives call through it

	makeVM    goja.Callable
	result    goja.Callable
	setLimit  goja.Callable
	errCtor   *goja.Object // PoligonError
	errorCtor *goja.Object // the intrinsic Error, whatever the script does to the global
	require   goja.Value
}

// newSandbox installs the sandbox in a new runtime: no source maps (their
// loader reads files), a bounded stack, the prelude's API as frozen objects
// over one native host call, console, and the size guards.
func newSandbox() (*sandbox, error) {
	rt := goja.New()
	sb := &sandbox{rt: rt}
	rt.SetParserOptions(parser.WithDisableSourceMaps)
	rt.SetMaxCallStackSize(maxCallStack)
	sb.errorCtor = rt.Get("Error").ToObject(rt)

	fn, err := rt.RunProgram(preludeProgram)
	if err != nil {
		return nil, fmt.Errorf("prelude: %w", err)
	}
	prelude, _ := goja.AssertFunction(fn)
	apiVal, err := prelude(goja.Undefined(),
		rt.ToValue(func(fc goja.FunctionCall) goja.Value { return sb.owner.hostCall(fc) }),
		rt.ToValue(func(fc goja.FunctionCall) goja.Value {
			sb.owner.consoleWrite(fc.Argument(0).String(), fc.Argument(1).String())
			return goja.Undefined()
		}),
		rt.ToValue(func(fc goja.FunctionCall) goja.Value {
			return rt.ToValue(sb.owner.decodeBase64(fc.Argument(0).String()))
		}))
	if err != nil {
		return nil, fmt.Errorf("prelude: %w", err)
	}
	api := apiVal.ToObject(rt)
	sb.makeVM, _ = goja.AssertFunction(api.Get("makeVM"))
	sb.result, _ = goja.AssertFunction(api.Get("result"))
	sb.errCtor = api.Get("PoligonError").ToObject(rt)
	sb.require = rt.ToValue(func(fc goja.FunctionCall) goja.Value { return sb.owner.requireModule(fc) })
	global := rt.GlobalObject()
	for _, name := range []string{"console", "PoligonError"} {
		if err := global.DefineDataProperty(name, api.Get(name), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE); err != nil {
			return nil, err
		}
	}

	if fn, err = rt.RunProgram(guardsProgram); err != nil {
		return nil, fmt.Errorf("guards: %w", err)
	}
	guards, _ := goja.AssertFunction(fn)
	setLimit, err := guards(goja.Undefined())
	if err != nil {
		return nil, fmt.Errorf("guards: %w", err)
	}
	sb.setLimit, _ = goja.AssertFunction(setLimit)
	return sb, nil
}

// bind gives the sandbox to a run: its clock, its seed, its memory ceiling.
func (sb *sandbox) bind(s *execution, clock time.Time, seed int64, limitBytes uint64) error {
	sb.owner = s
	if clock.IsZero() {
		clock = time.Unix(0, 0).UTC()
	}
	sb.rt.SetTimeSource(func() time.Time { return clock })
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15))
	sb.rt.SetRandSource(rng.Float64)
	_, err := sb.setLimit(goja.Undefined(), sb.rt.ToValue(float64(limitBytes)))
	return err
}

// Installing the sandbox is most of what a short run costs (a few hundred
// µs, mostly goja building the builtins the prelude and the guards touch),
// so a couple are kept ready: each run takes a new one, never a used one,
// and a background goroutine makes the next.
var (
	ready     = make(chan *sandbox, 2)
	refilling atomic.Bool
)

func takeSandbox() (*sandbox, error) {
	defer refill()
	select {
	case sb := <-ready:
		return sb, nil
	default:
		return newSandbox()
	}
}

func refill() {
	if !refilling.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer refilling.Store(false)
		for len(ready) < cap(ready) {
			sb, err := newSandbox()
			if err != nil {
				return // takeSandbox will build one inline and report the error
			}
			select {
			case ready <- sb:
			default:
				return
			}
		}
	}()
}
