package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/poligon/poligon/hostapi/calls"
)

// jsWidth bounds a generated line of the prelude; a longer call's
// arguments go one to a line.
const jsWidth = 118

// jsChecks are the prelude's functions that check a positional argument,
// by its check (calls.Arg, or str and num by the field's type).
var jsChecks = map[string]string{
	"str": "str", "num": "num", string(calls.ArgStrings): "stringMap", string(calls.ArgShot): "shotImage",
}

// jsReserved are the prelude's names a verb's code uses: no param may
// shadow them.
var jsReserved = []string{"str", "num", "stringMap", "shotImage", "String_", "options", "call", "shapers", "o", "opts", "vm", "vmid"}

// jsVerbs are the verbs of the vm object makeVM builds in
// runtime/js/prelude.js: one method per call, written as the prelude's own
// code would be (an object literal and methods cost a run what hand-written
// ones do, and no setter a script puts on Object.prototype sees them).
func (m *model) jsVerbs() string {
	var b strings.Builder
	group := ""
	for _, c := range m.calls {
		g, name := c.jsVerb()
		if g != group {
			if group != "" {
				b.WriteString("      },\n")
			}
			if g != "" {
				fmt.Fprintf(&b, "      %s: {\n", g)
			}
			group = g
		}
		indent := "      "
		if g != "" {
			indent += "  "
		}
		jsVerb(&b, indent, name, c)
	}
	if group != "" {
		b.WriteString("      },\n")
	}
	return b.String()
}

func jsVerb(b *strings.Builder, indent, name string, c *call) {
	q := strconv.Quote(c.Name)
	var params, fields []string
	for _, p := range c.Params {
		params = append(params, p.Name)
		field := p.Name
		if p.Field != "" {
			field = p.Field
		}
		var value string
		if check := c.jsCheck(p); check == string(calls.ArgText) {
			value = "String_(" + p.Name + ")"
		} else {
			value = fmt.Sprintf("%s(%s, %s, %s)", jsChecks[check], q, strconv.Quote(p.Name), p.Name)
		}
		fields = append(fields, field+": "+value)
	}
	var options []string
	for _, o := range c.Options {
		options = append(options, strconv.Quote(o.Name))
		fields = append(fields, o.Name+": o."+o.Name)
	}
	if len(options) > 0 {
		params = append(params, "opts")
	}
	fmt.Fprintf(b, "%s%s(%s) {\n", indent, name, strings.Join(params, ", "))
	in := indent + "  "
	if len(options) > 0 {
		fmt.Fprintf(b, "%sconst o = options(%s, opts, [%s]);\n", in, q, strings.Join(options, ", "))
	}
	prefix, suffix := "return ", ")"
	switch c.Result {
	case calls.AsAnswer:
		prefix, suffix = "return ", ""
	case calls.AsNothing:
		prefix, suffix = "", ""
	default:
		prefix = "return shapers." + c.Result.JS + "("
	}
	args := "{}"
	if len(fields) > 0 {
		args = "{ " + strings.Join(fields, ", ") + " }"
	}
	if line := fmt.Sprintf("%s%scall(%s, %s)%s;", in, prefix, q, args, suffix); len(line) <= jsWidth {
		b.WriteString(line + "\n")
	} else {
		fmt.Fprintf(b, "%s%scall(%s, {\n", in, prefix, q)
		for _, f := range fields {
			fmt.Fprintf(b, "%s  %s,\n", in, f)
		}
		fmt.Fprintf(b, "%s})%s;\n", in, suffix)
	}
	fmt.Fprintf(b, "%s},\n", indent)
}
