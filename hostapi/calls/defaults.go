package calls

import (
	"fmt"
	"time"
)

// Defaults holds the default of every option a call takes, by call and
// option, as the Registry declares them: what the host applies when a
// script leaves an option out (or passes 0). The MCP tools that mirror a
// call show the same values.
var Defaults = defaultsOf(Registry)

func defaultsOf(registry []Call) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, c := range registry {
		for _, o := range c.Options {
			if o.Default == nil {
				continue
			}
			if out[c.Name] == nil {
				out[c.Name] = map[string]any{}
			}
			out[c.Name][o.Name] = o.Default
		}
	}
	return out
}

func lookup(call, option string) any {
	v, ok := Defaults[call][option]
	if !ok {
		// A typo in the host's own code, not in a script: fail loudly.
		panic(fmt.Sprintf("calls: no default for %s option %s", call, option))
	}
	return v
}

// Default answers an option's default as the table holds it (an int or a
// string): the MCP tools that mirror a call show it as theirs.
func Default(call, option string) any { return lookup(call, option) }

// DefaultSeconds answers a time option's default as a duration.
func DefaultSeconds(call, option string) time.Duration {
	return time.Duration(lookup(call, option).(int)) * time.Second
}

// DefaultInt answers a count option's default.
func DefaultInt(call, option string) int { return lookup(call, option).(int) }

// DefaultString answers a name option's default.
func DefaultString(call, option string) string { return lookup(call, option).(string) }
