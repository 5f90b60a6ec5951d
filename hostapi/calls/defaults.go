package calls

import (
	"fmt"
	"time"
)

// Defaults holds the default of every option a call takes, by call and
// option: the one table the host applies when a script leaves an option out
// (or passes 0). stdlib/poligon.d.ts and the Go SDK document these values;
// a test fails when either disagrees with this table.
var Defaults = map[string]map[string]any{
	Exec:        {"timeout": 120},
	Expect:      {"timeout": 120},
	Check:       {"timeout": 120},
	RunDetached: {"wait": 45},
	ReadFile:    {"offset": 0, "max": 16384},
	WaitBoot:    {"timeout": 60},
	ExecGUI:     {"user": "test"},
	WaitStill:   {"seconds": 2, "timeout": 30},
	WaitChange:  {"timeout": 30},
	WaitWindow:  {"timeout": 20, "user": "test"},
	Click:       {"button": "left", "count": 1},
	WaitText:    {"timeout": 30},
	ClickLabel:  {"button": "left", "count": 1},
	// A script's power steps wait as long as its run may last: no client
	// waits on each call, and a step that returned early would race the
	// next one.
	Start:    {"wait": 600},
	Stop:     {"wait": 600},
	Snapshot: {"wait": 600},
	Rollback: {"wait": 600},
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
