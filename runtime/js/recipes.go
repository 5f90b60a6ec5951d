package js

import (
	"reflect"

	"github.com/dop251/goja/ast"
	"github.com/dop251/goja/parser"

	"github.com/poligon/poligon/runtime"
)

// collectRecipes finds the literal recipe calls of a script,
// x.recipe("name") and x.recipe("name", {key: ...}), so the loader can check
// recipe names and params before any run. A call whose name is not a string
// literal is not listed; one whose params are not an object literal (or
// have computed keys or a spread) is listed with Params nil.
func collectRecipes(program *ast.Program) []runtime.RecipeCall {
	var calls []runtime.RecipeCall
	seen := map[visited]bool{} // Program.DeclarationList repeats declarations of Body
	walk(reflect.ValueOf(program), seen, func(node any) {
		call, ok := node.(*ast.CallExpression)
		if !ok {
			return
		}
		if rc, ok := recipeCall(call); ok {
			calls = append(calls, rc)
		}
	})
	return calls
}

// literalMaxSleep is the longest x.sleep(<number literal>) the source makes,
// 0 when none: a stand's validator bounds sleeps "after recipe expansion"
// with it. It parses the source again (Load's own parse stays as it is);
// a source that does not parse answers 0, and Load reports why.
func literalMaxSleep(file string, source []byte) float64 {
	program, err := parser.ParseFile(nil, file, wrapModule(source), 0, parser.WithDisableSourceMaps)
	if err != nil {
		return 0
	}
	longest := 0.0
	walk(reflect.ValueOf(program), map[visited]bool{}, func(node any) {
		if call, ok := node.(*ast.CallExpression); ok {
			if s, ok := sleepCall(call); ok && s > longest {
				longest = s
			}
		}
	})
	return longest
}

// sleepCall is the seconds of x.sleep(N) with N a number literal.
func sleepCall(call *ast.CallExpression) (float64, bool) {
	dot, ok := call.Callee.(*ast.DotExpression)
	if !ok || dot.Identifier.Name != "sleep" || len(call.ArgumentList) == 0 {
		return 0, false
	}
	lit, ok := call.ArgumentList[0].(*ast.NumberLiteral)
	if !ok {
		return 0, false
	}
	switch v := lit.Value.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

func recipeCall(call *ast.CallExpression) (runtime.RecipeCall, bool) {
	dot, ok := call.Callee.(*ast.DotExpression)
	if !ok || dot.Identifier.Name != "recipe" || len(call.ArgumentList) == 0 {
		return runtime.RecipeCall{}, false
	}
	name, ok := call.ArgumentList[0].(*ast.StringLiteral)
	if !ok {
		return runtime.RecipeCall{}, false
	}
	rc := runtime.RecipeCall{Name: name.Value.String(), Params: []string{}}
	if len(call.ArgumentList) < 2 {
		return rc, true
	}
	obj, ok := call.ArgumentList[1].(*ast.ObjectLiteral)
	if !ok {
		rc.Params = nil
		return rc, true
	}
	for _, prop := range obj.Value {
		key, ok := literalKey(prop)
		if !ok {
			rc.Params = nil
			return rc, true
		}
		rc.Params = append(rc.Params, key)
	}
	return rc, true
}

// literalKey is the key of {key: v}, {"key": v} or {key} (not computed, not a spread).
func literalKey(prop ast.Property) (string, bool) {
	switch p := prop.(type) {
	case *ast.PropertyKeyed:
		if p.Computed {
			return "", false
		}
		switch k := p.Key.(type) {
		case *ast.StringLiteral:
			return k.Value.String(), true
		case *ast.Identifier:
			return k.Name.String(), true
		}
	case *ast.PropertyShort:
		return p.Name.Name.String(), true
	}
	return "", false
}

// visited is a pointer seen by walk; the type tells a struct from its first field.
type visited struct {
	ptr uintptr
	typ reflect.Type
}

var nodeType = reflect.TypeOf((*ast.Node)(nil)).Elem()

// walk visits every AST node under v. goja's ast has no visitor, and a
// reflective walk keeps up with node types it may add.
func walk(v reflect.Value, seen map[visited]bool, visit func(any)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Pointer {
			key := visited{v.Pointer(), v.Type()}
			if seen[key] {
				return
			}
			seen[key] = true
			if v.Type().Implements(nodeType) {
				visit(v.Interface())
			}
		}
		walk(v.Elem(), seen, visit)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				walk(v.Field(i), seen, visit)
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			walk(v.Index(i), seen, visit)
		}
	}
}
