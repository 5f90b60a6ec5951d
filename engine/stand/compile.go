package stand

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/poligon/poligon/internal/redact"
)

// Compile writes a valid plan as one CommonJS module for the script
// runtime: a recipe (tool: false) that sets up one machine per run, the one
// named by its role param, from step p.from on, announcing each step with
// vm.step. The same Resolved always gives the same bytes.
//
// Plan text only ever lands in string literals (JSON-encoded, or template
// literals with every backslash, backtick and ${ escaped) and in comments
// cut at line ends, so no plan can write code. A step that does not parse
// (r did not come from Validate) compiles to a step that throws.
func Compile(r Resolved) []byte {
	c := &compiler{r: r}
	c.header()
	c.steps()
	c.exports()
	return c.b.Bytes()
}

type compiler struct {
	r Resolved
	b bytes.Buffer
}

func (c *compiler) line(format string, a ...any) {
	fmt.Fprintf(&c.b, format, a...)
	c.b.WriteByte('\n')
}

func (c *compiler) header() {
	c.line("// Stand %s: compiled from its plan by poligon (`poligon stand compile plan.json`). Edit the plan, not this file.", singleLine(c.r.Name))
	if c.r.Notes != "" {
		for i, l := range lineBreak.Split(c.r.Notes, -1) {
			if i == 0 {
				c.line("// Notes: %s", l)
			} else {
				c.line("//   %s", l)
			}
		}
	}
	c.line("/// <reference path=\"poligon.d.ts\" />")
	c.line("")
	c.line("const stand = %s;", jsString(c.r.Name))
	if c.needsIP() {
		c.line("")
		c.line("// ip answers the address of an earlier machine, which the builder passes as p.ip_<role>.")
		c.line("function ip(p, role) {")
		c.line("  const addr = p[\"ip_\" + role];")
		c.line("  if (!addr) throw new Error(`stand ${stand}: the address of machine ${role} is not known (param ip_${role} is empty): the builder passes it once ${role} is up`);")
		c.line("  return addr;")
		c.line("}")
	}
}

func (c *compiler) needsIP() bool {
	for _, n := range c.r.Needs {
		if len(n) > 0 {
			return true
		}
	}
	return false
}

func (c *compiler) steps() {
	c.line("")
	c.line("// One list of steps per machine, in plan order: [label, run]. p.ip_<role> is the address of an earlier machine.")
	c.line("const steps = {")
	for i, m := range c.r.Machines {
		template, needs := m.Template, "nothing"
		if i < len(c.r.Templates) && c.r.Templates[i] != "" {
			template = c.r.Templates[i]
		}
		if i < len(c.r.Needs) && len(c.r.Needs[i]) > 0 {
			needs = strings.Join(c.r.Needs[i], ", ")
		}
		c.line("  // %s: template %s, needs %s", singleLine(m.Role), singleLine(template), singleLine(needs))
		if len(m.Steps) == 0 {
			c.line("  %s: [],", jsKey(m.Role))
			continue
		}
		c.line("  %s: [", jsKey(m.Role))
		for n, s := range m.Steps {
			// The step's number as stand_status shows it.
			c.line("    /* %d */ [%s, %s],", n+1, jsString(stepLabel(s)), c.stepFunc(m.Role, s))
		}
		c.line("  ],")
	}
	c.line("};")
}

// stepFunc is the (vm, p) => ... that runs one step.
func (c *compiler) stepFunc(role string, s Step) string {
	k, ok := kindNamed(s.Kind)
	if !ok {
		return throwFunc("unknown step kind " + s.Kind)
	}
	a, probs := k.parse(s.Arg)
	if len(probs) > 0 {
		return throwFunc(s.Kind + ": " + probs[0])
	}
	t := func(text string) string { return jsText(text, role, c.r.Name) }
	var call string
	switch s.Kind {
	case "exec":
		call = fmt.Sprintf("vm.exec(%s, { timeout: %s })", t(a.command), num(a.timeout))
	case "exec_gui":
		call = fmt.Sprintf("vm.execGui(%s, { user: %s })", t(a.command), t(a.user))
	case "expect":
		opts := "timeout: " + num(a.timeout)
		if a.contains != nil {
			opts += ", contains: " + t(*a.contains)
		}
		call = fmt.Sprintf("vm.expect(%s, { %s })", t(a.command), opts)
	case "wait_boot":
		return fmt.Sprintf("(vm, p) => { if (vm.waitBoot({ timeout: %s }) === null) throw new Error(%s); }",
			num(a.seconds), jsString(fmt.Sprintf("the guest agent did not answer within %s s", num(a.seconds))))
	case "sleep":
		call = fmt.Sprintf("vm.sleep(%s)", num(a.seconds))
	case "screenshot":
		if a.path == "" {
			call = "vm.screen.shot()"
		} else {
			call = fmt.Sprintf("vm.evidence.save(%s)", t(a.path))
		}
	case "click":
		call = fmt.Sprintf("vm.mouse.click(%d, %d, { button: %s, count: %d })", a.xy[0], a.xy[1], jsString(a.button), a.count)
	case "click_label":
		opts := ""
		if a.elem != "" {
			opts = "kind: " + jsString(a.elem) + ", "
		}
		call = fmt.Sprintf("vm.mouse.clickLabel(%s, { %sbutton: %s, count: %d })", t(a.label), opts, jsString(a.button), a.count)
	case "drag":
		call = fmt.Sprintf("vm.mouse.drag(%d, %d, %d, %d)", a.xy[0], a.xy[1], a.xy[2], a.xy[3])
	case "type":
		call = fmt.Sprintf("vm.keyboard.type(%s)", t(a.text))
	case "key":
		call = fmt.Sprintf("vm.keyboard.press(%s)", jsString(a.key))
	case "snapshot":
		call = fmt.Sprintf("vm.power.snapshot(%s)", t(a.name))
	case "rollback":
		call = fmt.Sprintf("vm.power.rollback(%s)", t(a.name))
	case "recipe", "script":
		if len(a.params) == 0 {
			call = fmt.Sprintf("vm.recipe(%s)", jsString(a.name))
			break
		}
		fields := make([]string, len(a.params))
		for i, p := range a.params {
			fields[i] = jsKey(p.name) + ": " + t(p.value)
		}
		call = fmt.Sprintf("vm.recipe(%s, { %s })", jsString(a.name), strings.Join(fields, ", "))
	default:
		return throwFunc("step kind " + s.Kind + " has no compiler")
	}
	return "(vm, p) => " + call
}

func throwFunc(msg string) string {
	return fmt.Sprintf("(vm, p) => { throw new Error(%s); }", jsString("this step is not valid: "+msg))
}

func (c *compiler) exports() {
	var roles, machines []string
	for i, m := range c.r.Machines {
		roles = append(roles, m.Role)
		t := m.Template
		if i < len(c.r.Templates) && c.r.Templates[i] != "" {
			t = c.r.Templates[i]
		}
		machines = append(machines, fmt.Sprintf("%s (%s)", m.Role, t))
	}
	description := fmt.Sprintf("Stand %s: %s, set up step by step from its plan. The builder runs it once per machine "+
		"with role=<role>, from=<the first step to run> and ip_<role> for each earlier machine's address it uses.",
		c.r.Name, strings.Join(machines, ", "))
	c.line("")
	c.line("/** @type {poligon.Script} */")
	c.line("module.exports = {")
	c.line("  name: %s,", jsString("stand_"+c.r.Name))
	c.line("  description: %s,", jsString(description))
	c.line("  tool: false,")
	c.line("  timeout: %s,", num(c.timeout()))
	c.line("  params: {")
	c.line("    role: { description: %s },", jsString("the machine to set up: "+listed(roles, len(roles))))
	c.line("    from: { description: \"the step to start at (the builder resumes a stand with a later one)\", default: \"1\" },")
	for _, role := range c.ipRoles() {
		c.line("    %s: { description: %s, default: \"\" },", jsKey("ip_"+role), jsString("the address of machine "+role))
	}
	c.line("  },")
	c.line("  run(vm, p) {")
	c.line("    if (!Object.prototype.hasOwnProperty.call(steps, p.role)) {")
	c.line("      throw new Error(`stand ${stand} has no machine ${JSON.stringify(p.role)} (roles: ${Object.keys(steps).join(\", \")})`);")
	c.line("    }")
	c.line("    const list = steps[p.role];")
	c.line("    const from = Number(p.from);")
	c.line("    if (!Number.isInteger(from) || from < 1 || from > list.length + 1) {")
	c.line("      throw new Error(`from must be a step number from 1 to ${list.length + 1}, not ${JSON.stringify(p.from)}`);")
	c.line("    }")
	c.line("    for (let i = from; i <= list.length; i++) {")
	c.line("      vm.step(i, list.length, list[i - 1][0]);")
	c.line("      list[i - 1][1](vm, p);")
	c.line("    }")
	c.line("    return `${p.role}: ${list.length} steps`;")
	c.line("  },")
	c.line("};")
}

// ipRoles are the roles some machine uses the address of, in plan order.
func (c *compiler) ipRoles() []string {
	used := map[string]bool{}
	for _, needs := range c.r.Needs {
		for _, role := range needs {
			used[role] = true
		}
	}
	var out []string
	for _, m := range c.r.Machines {
		if used[m.Role] {
			out = append(out, m.Role)
			used[m.Role] = false
		}
	}
	return out
}

// timeout is the module's time limit in seconds: every step's own bound,
// summed over all machines, and at least 600.
func (c *compiler) timeout() float64 {
	total := 0.0
	for _, m := range c.r.Machines {
		for _, s := range m.Steps {
			total += c.bound(s)
		}
	}
	return max(total, 600)
}

// bound is the longest one step may take, in seconds.
func (c *compiler) bound(s Step) float64 {
	k, ok := kindNamed(s.Kind)
	if !ok {
		return 0
	}
	a, _ := k.parse(s.Arg)
	switch s.Kind {
	case "exec", "expect":
		return a.timeout
	case "sleep", "wait_boot":
		return a.seconds
	case "recipe", "script":
		return max(600, c.r.ScriptTimeouts[a.name].Seconds())
	}
	return 60
}

// Redacted is a plan as the audit log and the traces keep it: its name,
// and each machine's role, template and steps as their labels (redacted as
// stepLabel redacts); notes and a plan that does not decode by size only.
func Redacted(data []byte) any {
	p, err := Decode(unquotePlan(data))
	if err != nil {
		return redact.Placeholder(string(data))
	}
	type machine struct {
		Role     string   `json:"role"`
		Template string   `json:"template"`
		Steps    []string `json:"steps"`
	}
	out := struct {
		Name     string    `json:"name"`
		Machines []machine `json:"machines"`
		Notes    string    `json:"notes,omitempty"`
	}{Name: p.Name}
	if p.Notes != "" {
		out.Notes = redact.Placeholder(p.Notes)
	}
	for _, m := range p.Machines {
		rm := machine{Role: m.Role, Template: m.Template, Steps: []string{}}
		for _, s := range m.Steps {
			rm.Steps = append(rm.Steps, s.Label())
		}
		out.Machines = append(out.Machines, rm)
	}
	return out
}

// stepLabel is how a step shows in progress and errors: its kind and its
// argument as the plan wrote it (placeholders unrendered), on one line,
// redacted as the audit log redacts: typed text, secret-named params and
// the secrets a command carries (redact.Command) stand as their size.
func stepLabel(s Step) string {
	k, ok := kindNamed(s.Kind)
	if !ok {
		return cut(s.Kind)
	}
	a, _ := k.parse(s.Arg)
	l := s.Kind
	switch s.Kind {
	case "exec":
		l += " " + redact.Command(a.command)
	case "exec_gui":
		l += " " + redact.Command(a.command)
		if a.user != "test" {
			l += " (as " + a.user + ")"
		}
	case "expect":
		l += " " + redact.Command(a.command)
		if a.contains != nil {
			l += fmt.Sprintf(" (contains %q)", *a.contains)
		}
	case "wait_boot", "sleep":
		l += " " + num(a.seconds)
	case "screenshot":
		if a.path != "" {
			l += " " + a.path
		}
	case "click":
		l += fmt.Sprintf(" %d,%d", a.xy[0], a.xy[1])
		if a.button != "left" {
			l += " " + a.button
		}
		if a.count > 1 {
			l += fmt.Sprintf(" x%d", a.count)
		}
	case "click_label":
		l += fmt.Sprintf(" %q", a.label)
		if a.elem != "" {
			l += " (" + a.elem + ")"
		}
		if a.button != "left" {
			l += " " + a.button
		}
		if a.count > 1 {
			l += fmt.Sprintf(" x%d", a.count)
		}
	case "drag":
		l += fmt.Sprintf(" %d,%d -> %d,%d", a.xy[0], a.xy[1], a.xy[2], a.xy[3])
	case "type":
		l += " " + redact.Placeholder(a.text)
	case "key":
		l += " " + a.key
	case "snapshot", "rollback":
		l += " " + a.name
	case "recipe", "script":
		l += " " + a.name
		for _, p := range a.params {
			if secretName(p.name) {
				l += " " + p.name + "=" + redact.Placeholder(p.value)
			} else {
				l += " " + p.name + "=" + shownValue(p.value)
			}
		}
	}
	return cut(printable(l))
}

// printable is a label on one line without control characters.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029' || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, strings.ReplaceAll(s, "\r\n", "\n"))
}

// secretName says a param name looks like it holds a secret: the audit
// log's rule, and "key" anywhere in it (no recipe param names a key to
// press).
func secretName(name string) bool {
	return redact.IsSecretName(name) || strings.Contains(strings.ToLower(name), "key")
}

func shownValue(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"'=") {
		return fmt.Sprintf("%q", v)
	}
	return v
}

// cut keeps a label to 160 characters.
func cut(s string) string {
	const max = 160
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return string([]rune(s)[:max-1]) + "…"
}

// lineBreak is every JavaScript line terminator: a comment ends at any.
var lineBreak = regexp.MustCompile("\r\n|[\r\n\u2028\u2029]")

func singleLine(s string) string { return lineBreak.ReplaceAllString(s, " ") }

var identifier = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// jsKey is a property name: bare when it is a plain identifier, else
// computed (["__proto__"]: v defines a property; "__proto__": v would not).
func jsKey(s string) string {
	if identifier.MatchString(s) {
		return s
	}
	return "[" + jsString(s) + "]"
}

// jsString is a JSON string literal, which is a JavaScript one too (Go
// escapes U+2028 and U+2029); <, > and & stay readable.
func jsString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// jsText is a step's text with its placeholders rendered: a plain string
// literal without any, else a template literal whose only ${...} are ours.
func jsText(text, role, stand string) string {
	segs := segments(text)
	plain := true
	for _, s := range segs {
		if s.ph && (s.text == "vmid" || strings.HasPrefix(s.text, "ip.")) {
			plain = false
		}
	}
	if plain {
		return jsString(render(segs, role, stand))
	}
	var b, lit strings.Builder
	flush := func() { b.WriteString(templateEscape(lit.String())); lit.Reset() }
	b.WriteByte('`')
	for _, s := range segs {
		switch {
		case !s.ph:
			lit.WriteString(s.text)
		case s.text == "vmid":
			flush()
			b.WriteString("${vm.vmid}")
		case strings.HasPrefix(s.text, "ip."):
			flush()
			b.WriteString("${ip(p, " + jsString(strings.TrimPrefix(s.text, "ip.")) + ")}")
		default:
			lit.WriteString(render([]segment{s}, role, stand))
		}
	}
	flush()
	b.WriteByte('`')
	return b.String()
}

// render writes segments with {{role}} and {{stand}} filled in (the rest as written).
func render(segs []segment, role, stand string) string {
	var b strings.Builder
	for _, s := range segs {
		switch {
		case !s.ph:
			b.WriteString(s.text)
		case s.text == "role":
			b.WriteString(role)
		case s.text == "stand":
			b.WriteString(stand)
		default:
			b.WriteString("{{" + s.text + "}}")
		}
	}
	return b.String()
}

// templateEscape makes text safe inside a template literal: it can neither
// end it nor open a ${...}, and control characters are escaped.
func templateEscape(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '`':
			b.WriteString("\\`")
		case r == '$' && i+1 < len(s) && s[i+1] == '{':
			b.WriteString(`\$`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Label is the step as the compiled module and stand_status name it: the
// plan's text as written, secret-looking params hidden.
func (s Step) Label() string { return stepLabel(s) }
