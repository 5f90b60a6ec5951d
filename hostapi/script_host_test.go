package hostapi

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/poligon/poligon/hostapi/calls"
)

// The host answers exactly the calls the registry declares.
func TestEveryRegisteredCallHasAHandler(t *testing.T) {
	var registered []string
	for _, c := range calls.Registry {
		registered = append(registered, c.Name)
	}
	slices.Sort(registered)
	handled := Names()
	slices.Sort(handled)
	if !slices.Equal(registered, handled) {
		t.Errorf("the host answers %v;\nthe registry declares %v", handled, registered)
	}
}

// sample is a JSON value of a field's type.
func sample(t reflect.Type) any {
	switch t.Kind() {
	case reflect.String:
		return "a"
	case reflect.Bool:
		return true
	case reflect.Map:
		return map[string]string{"k": "v"}
	default:
		return 1
	}
}

// Each handler decodes the arguments its registry entry declares: every
// field the JS prelude and the Go SDK may send is known to it. (A handler
// decodes before it acts, so the field after them, unknown to every call,
// is the first error when the others decode.)
func TestHandlersDecodeTheRegisteredArguments(t *testing.T) {
	h := &Script{}
	for _, c := range calls.Registry {
		var fields []string
		args := reflect.TypeOf(c.Args)
		for i := range args.NumField() {
			f := args.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			v, _ := json.Marshal(sample(f.Type))
			fields = append(fields, `"`+name+`":`+string(v))
		}
		raw := json.RawMessage("{" + strings.Join(append(fields, `"zz_unknown":1`), ",") + "}")
		_, err := h.Call(context.Background(), c.Name, raw)
		if err == nil || !strings.Contains(err.Error(), `unknown field "zz_unknown"`) {
			t.Errorf("%s %s: %v; want only zz_unknown refused", c.Name, raw, err)
		}
	}
}
