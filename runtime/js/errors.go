package js

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/file"
	"github.com/dop251/goja/parser"

	"github.com/poligon/poligon/runtime"
)

// The CommonJS wrapper. It shares the first line with the source, so line
// numbers are the file's own; columns on line 1 are shifted by its length.
const (
	wrapperPrefix = "(function (exports, require, module, __filename) {"
	wrapperSuffix = "\n})"
)

func wrapModule(source []byte) string {
	return wrapperPrefix + string(source) + wrapperSuffix
}

// location formats a position in a wrapped module as the file shows it.
func location(p file.Position) string {
	col := p.Column
	if p.Line == 1 {
		col -= len(wrapperPrefix)
	}
	return fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, col)
}

// isScriptFrame says whether a frame is in a script (not the prelude, the
// stdlib, eval'd code or a native function): where errors point to.
func isScriptFrame(f *goja.StackFrame) bool {
	name := f.SrcName()
	return name != "" && name != "<native>" && name != "<eval>" &&
		!strings.HasPrefix(name, "poligon:") && !strings.HasPrefix(name, "poligon/")
}

// where is the innermost script location of a stack.
func where(stack []goja.StackFrame) string {
	for i := range stack {
		if isScriptFrame(&stack[i]) {
			return location(stack[i].Position())
		}
	}
	return ""
}

func stackOf(err error) []goja.StackFrame {
	switch e := err.(type) {
	case *goja.Exception:
		return e.Stack()
	case *goja.InterruptedError:
		return e.Stack()
	case *goja.StackOverflowError:
		return e.Stack()
	}
	return nil
}

var esModuleSyntax = regexp.MustCompile(`(?m)^\s*(import|export)\b`)

// syntaxError reports a parse or compile error with its location, and ES
// module syntax with what to write instead.
func syntaxError(path string, source []byte, err error) error {
	message, pos := err.Error(), file.Position{}
	var list parser.ErrorList
	var one *parser.Error
	var compile *goja.CompilerSyntaxError
	switch {
	case errors.As(err, &list) && len(list) > 0:
		message, pos = list[0].Message, list[0].Position
	case errors.As(err, &one):
		message, pos = one.Message, one.Position
	case errors.As(err, &compile) && compile.File != nil:
		message, pos = compile.Message, compile.File.Position(compile.Offset)
	}
	se := &runtime.ScriptError{Script: path, Message: "SyntaxError: " + message}
	if pos.Line > 0 {
		se.Where = location(pos)
	}
	if esModuleSyntax.Match(source) {
		se.Message = "ES module syntax (import/export) is not supported: scripts are CommonJS modules, " +
			"use require(\"...\") and module.exports = {...} (" + message + ")"
	}
	return se
}

// scriptError turns what ended a run inside the script into a ScriptError:
// the thrown value's message and hint, and the innermost script location.
func (s *execution) scriptError(err error) error {
	se := &runtime.ScriptError{Script: s.m.path, Message: err.Error(), Where: where(stackOf(err))}
	switch e := err.(type) {
	case *runtime.ScriptError:
		return e
	case *goja.StackOverflowError:
		se.Message = fmt.Sprintf("RangeError: call stack deeper than %d frames", maxCallStack)
	case *goja.Exception:
		s.describeThrown(e.Value(), se)
	case *rejected:
		s.describeThrown(e.value, se)
	}
	return se
}

// describeThrown fills the message, hint and cause of a thrown value.
func (s *execution) describeThrown(v goja.Value, se *runtime.ScriptError) {
	obj, ok := v.(*goja.Object)
	if !ok {
		if v != nil {
			se.Message = "uncaught " + v.String()
		}
		return
	}
	if cause, ok := s.hostErrs[obj]; ok {
		se.Err = cause
	}
	_ = s.guard(func() {
		message, isError := getString(obj, "message")
		if !isError {
			se.Message = "uncaught " + obj.String()
			if text, err := s.result(goja.Undefined(), obj); err == nil && text.String() != "{}" {
				se.Message = "uncaught " + text.String() // throw {code: 2}
			}
			return
		}
		se.Message = message
		if name, _ := getString(obj, "name"); name != "" && name != "Error" && name != "PoligonError" {
			se.Message = name + ": " + message
		}
		se.Hint, _ = getString(obj, "hint")
	})
	if se.Hint == "" {
		var he *runtime.HostError
		if errors.As(se.Err, &he) {
			se.Hint = he.Hint
		}
	}
}

// limitError reports a run ended by its context: the time limit, the memory
// ceiling or a cancellation, at the script line it was running.
func (s *execution) limitError(cause, err error) error {
	se := &runtime.ScriptError{Script: s.m.path, Where: where(stackOf(err))}
	switch {
	case errors.Is(cause, runtime.ErrTimeout):
		se.Message, se.Err = fmt.Sprintf("script time limit %s reached", s.limits.Timeout), runtime.ErrTimeout
	case errors.Is(cause, runtime.ErrMemory):
		se.Message, se.Err = fmt.Sprintf("script memory limit %d MB reached", s.limits.MemoryMB), runtime.ErrMemory
	default:
		se.Message, se.Err = "script cancelled", runtime.ErrCancelled
		if cause != nil && !errors.Is(cause, context.Canceled) {
			se.Message += ": " + cause.Error()
		}
	}
	return se
}

// getString reads a string property (a getter may throw: call under guard).
func getString(obj *goja.Object, key string) (string, bool) {
	v := obj.Get(key)
	if v == nil {
		return "", false
	}
	str, ok := v.Export().(string)
	return str, ok
}
