package js

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dop251/goja"

	"github.com/poligon/poligon/runtime"
)

// parseManifest reads {name, description, title, params, tool, timeout, run} from a
// module's exports and validates it.
func parseManifest(exports goja.Value) (runtime.Manifest, error) {
	var m runtime.Manifest
	obj, ok := exports.(*goja.Object)
	if !ok || isNullish(exports) {
		return m, errors.New("the script exports nothing: set module.exports = {name, description, params, run}")
	}
	var err error
	if m.Name, err = stringField(obj, "name", true); err != nil {
		return m, err
	}
	if m.Description, err = stringField(obj, "description", true); err != nil {
		return m, err
	}
	if m.Title, err = stringField(obj, "title", false); err != nil {
		return m, err
	}
	if m.Params, err = parseParams(obj.Get("params")); err != nil {
		return m, err
	}
	m.Tool = true
	if v := obj.Get("tool"); !isNullish(v) {
		b, ok := v.Export().(bool)
		if !ok {
			return m, fmt.Errorf("tool must be true or false, not %s", describe(v))
		}
		m.Tool = b
	}
	if v := obj.Get("timeout"); !isNullish(v) {
		seconds, ok := number(v)
		if !ok || seconds <= 0 || math.IsInf(seconds, 0) {
			return m, fmt.Errorf("timeout must be a positive number of seconds, not %s", describe(v))
		}
		m.Timeout = time.Duration(seconds * float64(time.Second))
	}
	if _, ok := goja.AssertFunction(obj.Get("run")); !ok {
		return m, errors.New("run must be a function: run(vm, params) { ... }")
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	return m, nil
}

// parseParams reads params: {name: {description, default}} in declaration order.
func parseParams(v goja.Value) ([]runtime.Param, error) {
	params := []runtime.Param{}
	if isNullish(v) {
		return params, nil
	}
	obj, ok := v.(*goja.Object)
	if !ok || obj.ClassName() == "Array" || obj.ClassName() == "Function" {
		return nil, fmt.Errorf("params must be an object {name: {description, default}}, not %s", describe(v))
	}
	for _, name := range obj.Keys() {
		entry, ok := obj.Get(name).(*goja.Object)
		if !ok || entry.ClassName() == "Array" || entry.ClassName() == "Function" {
			return nil, fmt.Errorf("param %q must be an object {description, default}, not %s", name, describe(obj.Get(name)))
		}
		p := runtime.Param{Name: name}
		for _, key := range entry.Keys() {
			val := entry.Get(key)
			s, isString := val.Export().(string)
			switch {
			case key != "description" && key != "default":
				return nil, fmt.Errorf("param %q has an unknown key %q (known: description, default)", name, key)
			case isNullish(val):
			case !isString:
				return nil, fmt.Errorf("param %q: %s must be a string, not %s", name, key, describe(val))
			case key == "description":
				p.Description = s
			default:
				p.Default = &s
			}
		}
		params = append(params, p)
	}
	return params, nil
}

func stringField(obj *goja.Object, key string, required bool) (string, error) {
	v := obj.Get(key)
	if isNullish(v) {
		if required {
			return "", fmt.Errorf("%s is missing", key)
		}
		return "", nil
	}
	s, ok := v.Export().(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, not %s", key, describe(v))
	}
	return s, nil
}

func number(v goja.Value) (float64, bool) {
	switch n := v.Export().(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, !math.IsNaN(n)
	}
	return 0, false
}

func isNullish(v goja.Value) bool {
	return v == nil || goja.IsUndefined(v) || goja.IsNull(v)
}

// describe names a JS value's type for an error.
func describe(v goja.Value) string {
	switch {
	case v == nil || goja.IsUndefined(v):
		return "undefined"
	case goja.IsNull(v):
		return "null"
	}
	if obj, ok := v.(*goja.Object); ok {
		switch obj.ClassName() {
		case "Array":
			return "an array"
		case "Function":
			return "a function"
		}
		return "an object"
	}
	switch v.Export().(type) {
	case string:
		return fmt.Sprintf("the string %q", v.String())
	case bool:
		return "a boolean"
	case int64, float64:
		return "the number " + v.String()
	}
	return v.String()
}
