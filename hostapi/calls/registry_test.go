package calls

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// boolField answers whether an answer type has a boolean JSON field name
// (its own or an embedded struct's).
func boolField(t reflect.Type, name string) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && boolField(f.Type, name) {
			return true
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name && f.Type.Kind() == reflect.Bool {
			return true
		}
	}
	return false
}

// Each verb family keeps its meaning (the package doc): the registry holds
// every call to the family its name puts it in.
func TestVerbFamiliesKeepTheirMeaning(t *testing.T) {
	for _, c := range Registry {
		verb := c.Name[strings.LastIndex(c.Name, ".")+1:]
		answer := reflect.TypeOf(c.Answer)
		nullable := strings.HasSuffix(c.Result.TS, "| null")
		switch {
		case strings.HasPrefix(verb, "wait"):
			if !nullable || !strings.Contains(c.Result.Doc, "null on timeout") {
				t.Errorf("%s: a wait* verb answers null on timeout; its result is %q", c.Name, c.Result.TS)
			}
			if !boolField(answer, "ok") {
				t.Errorf("%s: a wait* answer says whether it timed out (ok, as WaitAnswer's); %s has no ok", c.Name, answer.Name())
			}
			if _, ok := Defaults[c.Name]["timeout"]; !ok {
				t.Errorf("%s: a wait* verb has a timeout with a default", c.Name)
			}
		case strings.HasPrefix(verb, "check"):
			if !nullable {
				t.Errorf("%s: a check* verb answers a value or null; its result is %q", c.Name, c.Result.TS)
			}
			if !boolField(answer, "ok") && !boolField(answer, "found") {
				t.Errorf("%s: a check* answer says whether the condition holds (ok or found)", c.Name)
			}
		case strings.HasPrefix(verb, "expect"):
			if nullable {
				t.Errorf("%s: an expect* verb fails instead of answering null; its result is %q", c.Name, c.Result.TS)
			}
		}
	}
}

// Every time option has a default in seconds, which the docs show.
func TestEveryTimeOptionHasADefault(t *testing.T) {
	for _, c := range Registry {
		for _, o := range c.Options {
			if o.Name != "timeout" && o.Name != "wait" {
				continue
			}
			if _, ok := o.Default.(int); !ok {
				t.Errorf("%s: option %s has no default in seconds", c.Name, o.Name)
			}
		}
	}
}

// Defaults and the lookups the host uses answer what the entries declare,
// and nothing for an option without a default.
func TestDefaultsAreTheRegistrys(t *testing.T) {
	for _, c := range Registry {
		for _, o := range c.Options {
			got, ok := Defaults[c.Name][o.Name]
			if ok != (o.Default != nil) || got != o.Default {
				t.Errorf("Defaults[%s][%s] = %v, %v; the entry says %v", c.Name, o.Name, got, ok, o.Default)
			}
		}
		if e, ok := Lookup(c.Name); !ok || e.Go != c.Go {
			t.Errorf("Lookup(%s) = %+v, %v", c.Name, e, ok)
		}
	}
	if got := DefaultSeconds(WaitBoot, "timeout"); got != time.Duration(Defaults[WaitBoot]["timeout"].(int))*time.Second {
		t.Errorf("DefaultSeconds(waitBoot, timeout) = %s", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a default nobody declared did not panic")
		}
	}()
	Default(Exec, "timout")
}
