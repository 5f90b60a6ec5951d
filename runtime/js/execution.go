package js

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dop251/goja"

	"github.com/poligon/poligon/runtime"
)

// execution is one goja runtime with the sandbox installed: one run, or the
// load-time evaluation of a manifest. It lives on one goroutine.
type execution struct {
	*sandbox
	m      *Module
	ctx    context.Context // ends with the run: cancel, time limit, memory limit
	host   runtime.Host
	log    func(string)
	limits runtime.Limits

	hostErrs map[*goja.Object]error // thrown PoligonErrors -> the host's error
	modules  map[string]*goja.Object
}

// execute runs body in a fresh sandbox bounded by limits and ctx, and turns
// whatever ends it early into a *runtime.ScriptError.
func (m *Module) execute(ctx context.Context, host runtime.Host, log func(string), limits runtime.Limits,
	clock time.Time, seed int64, body func(*execution) error) error {
	limits = limits.Resolve(m.manifest)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, limits.Timeout, runtime.ErrTimeout)
	defer stop()

	sb, err := takeSandbox()
	if err != nil {
		return err
	}
	s := &execution{
		sandbox: sb, m: m, ctx: ctx, host: host, log: log, limits: limits,
		hostErrs: map[*goja.Object]error{}, modules: map[string]*goja.Object{},
	}
	if err := sb.bind(s, clock, seed, uint64(limits.MemoryMB)<<20); err != nil {
		return err
	}
	// The k6 pattern: whatever ends the context stops the JS at its next
	// instruction; host calls get the same ctx, so a blocking call ends too.
	stopInterrupt := context.AfterFunc(ctx, func() { sb.rt.Interrupt(errStopped) })
	defer stopInterrupt()
	stopWatch := watchMemory(uint64(limits.MemoryMB)<<20, func() { cancel(runtime.ErrMemory) })
	defer stopWatch()

	// The JS runs on its own goroutine so that Run answers a limit or a
	// cancel even when the script is stuck inside a builtin, which goja
	// cannot interrupt: after stuckGrace the run is abandoned (its goroutine
	// ends when the builtin returns and meets the interrupt).
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("js runtime failed: %v", p)
			}
		}()
		done <- body(s)
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done:
		case <-time.After(stuckGrace):
			se := s.limitError(context.Cause(ctx), nil).(*runtime.ScriptError)
			se.Message += " (the script is stuck in a builtin call and was abandoned)"
			if m.opts.Logger != nil {
				m.opts.Logger.Warn("script abandoned: a builtin call does not return after its run ended",
					"script", m.path, "reason", se.Message)
			}
			return se
		}
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return s.limitError(context.Cause(ctx), err)
	}
	return s.scriptError(err)
}

// stuckGrace is how long a run that should have stopped may take to do so
// (a var: tests shorten it).
var stuckGrace = 2 * time.Second

// errStopped is the interrupt value; the context's cause says why.
var errStopped = errors.New("script stopped")

// hostCall is the one door out: __call(name, argsJSON) -> answerJSON, or a
// thrown PoligonError.
func (s *execution) hostCall(fc goja.FunctionCall) goja.Value {
	name := fc.Argument(0).String()
	args := json.RawMessage(fc.Argument(1).String())
	if s.ctx.Err() != nil {
		s.rt.Interrupt(errStopped) // at the next instruction, whatever the AfterFunc's timing
		panic(s.newHostError(name, context.Cause(s.ctx)))
	}
	answer, err := s.callHost(name, args)
	if s.ctx.Err() != nil {
		s.rt.Interrupt(errStopped) // the run ended during the call: the script goes no further
	}
	if err == nil && len(answer) > 0 && !json.Valid(answer) {
		err = fmt.Errorf("the host answered %s with invalid JSON", name)
	}
	if err != nil {
		panic(s.newHostError(name, err))
	}
	if len(answer) == 0 {
		return s.rt.ToValue("null")
	}
	return s.rt.ToValue(string(answer))
}

// callHost calls the host; a host that panics fails the call, not the server.
func (s *execution) callHost(name string, args json.RawMessage) (answer json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("host call %s failed: %v", name, p)
		}
	}()
	return s.host.Call(s.ctx, name, args)
}

// newHostError builds the PoligonError a failed call throws and remembers
// the Go error behind it, for the ScriptError if the script does not catch it.
func (s *execution) newHostError(call string, err error) *goja.Object {
	message, hint := err.Error(), ""
	var he *runtime.HostError
	if errors.As(err, &he) {
		message, hint = he.Message, he.Hint
	}
	obj, cerr := s.rt.New(s.errCtor, s.rt.ToValue(call), s.rt.ToValue(message), s.rt.ToValue(hint))
	if cerr != nil {
		panic(cerr) // only an interrupt can make a frozen constructor fail
	}
	s.hostErrs[obj] = err
	return obj
}

func (s *execution) consoleWrite(level, text string) {
	switch level {
	case "warn":
		text = "warning: " + text
	case "error":
		text = "error: " + text
	}
	switch {
	case s.log != nil:
		s.log(text)
	case s.m.opts.Logger != nil:
		s.m.opts.Logger.Info("script console", "script", s.m.file, "message", text)
	}
}

// decodeBase64 decodes file.read answers as UTF-8 (invalid bytes: U+FFFD).
func (s *execution) decodeBase64(b64 string) string {
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		panic(s.rt.NewTypeError("file.read: the host answered invalid base64: %v", err))
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// guard runs Go code that touches script values (getters may run script
// code and throw, or be interrupted) and answers what it threw.
func (s *execution) guard(f func()) error {
	fn, _ := goja.AssertFunction(s.rt.ToValue(func(goja.FunctionCall) goja.Value {
		f()
		return goja.Undefined()
	}))
	_, err := fn(goja.Undefined())
	return err
}

// rethrow throws an error a nested call answered into the calling script,
// keeping its stack; uncatchable ones (interrupts) stay uncatchable.
func (s *execution) rethrow(err error) {
	switch err.(type) {
	case *goja.Exception, *goja.InterruptedError, *goja.StackOverflowError:
		panic(err)
	}
	panic(s.rt.NewGoError(err))
}
