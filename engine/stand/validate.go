package stand

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/poligon/poligon/runtime"
)

// namePattern is what stand names and roles match: they become DNS labels
// (<owner>-repro-<stand>-<role>), and without "-" or "_" no stand's name is
// a prefix of another's VMs.
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

const (
	maxVMName          = 63 // a DNS label
	defaultMaxMachines = 4
	defaultMaxBuilding = 2
	recipeDepth        = 3 // recipes nest at most this deep
	notForClone        = "not-for-clone"
)

// VMName is the name of a stand's machine; with role "" it is the prefix
// every VM of the stand has.
func VMName(owner, stand, role string) string { return owner + "-repro-" + stand + "-" + role }

// String says the problem with where it is: "machine server, step 2
// (recipe): unknown param ...".
func (p Problem) String() string {
	var where string
	switch {
	case p.Machine != "" && p.Step > 0 && p.Kind != "":
		where = fmt.Sprintf("machine %s, step %d (%s): ", p.Machine, p.Step, p.Kind)
	case p.Machine != "" && p.Step > 0:
		where = fmt.Sprintf("machine %s, step %d: ", p.Machine, p.Step)
	case p.Machine != "":
		where = fmt.Sprintf("machine %s: ", p.Machine)
	}
	return where + p.Message
}

// Check decodes and validates a plan; a decode error is its one Problem.
func Check(data []byte, env Env) (Resolved, []Problem) {
	p, err := Decode(data)
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			return Resolved{}, []Problem{de.Problem}
		}
		return Resolved{}, []Problem{{Message: err.Error()}}
	}
	return Validate(p, env)
}

// Validate checks everything about a plan that can be checked before a VM
// is cloned, and answers every problem found, in plan order. The Resolved
// is the zero value unless there are none.
func Validate(p Plan, env Env) (Resolved, []Problem) {
	v := &validator{env: env, plan: p, roles: map[string]int{}}
	if v.env.MaxMachines <= 0 {
		v.env.MaxMachines = defaultMaxMachines
	}
	if v.env.MaxBuilding <= 0 {
		v.env.MaxBuilding = defaultMaxBuilding
	}
	v.checkPlan()
	r := Resolved{Plan: p, Templates: make([]string, len(p.Machines)), Needs: make([][]string, len(p.Machines)),
		ScriptTimeouts: map[string]time.Duration{}}
	v.refs = make([][]ipRef, len(p.Machines))
	for i, m := range p.Machines {
		r.Templates[i] = v.checkMachine(i, m)
		for j, s := range m.Steps {
			v.checkStep(i, j+1, s, r.ScriptTimeouts)
		}
	}
	r.Needs = v.checkRefs()
	if len(v.probs) > 0 {
		return Resolved{}, v.probs
	}
	return r, nil
}

type validator struct {
	env   Env
	plan  Plan
	probs []Problem
	roles map[string]int // valid role -> index of the machine it names first
	refs  [][]ipRef      // {{ip.<role>}} uses, per machine
}

// ipRef is one {{ip.<role>}} a step uses.
type ipRef struct {
	step int
	role string
}

func (v *validator) add(machine string, step int, kind, format string, a ...any) {
	v.probs = append(v.probs, Problem{Machine: machine, Step: step, Kind: kind, Message: fmt.Sprintf(format, a...)})
}

// label names machine i in problems: its role, or #i when the role is bad.
func (v *validator) label(i int) string {
	role := v.plan.Machines[i].Role
	if first, ok := v.roles[role]; ok && first == i {
		return role
	}
	return fmt.Sprintf("#%d", i+1)
}

func (v *validator) checkPlan() {
	p, env := v.plan, v.env
	switch {
	case p.Name == "":
		v.add("", 0, "", "name is missing: a stand needs a name of lowercase letters and digits, like nginxws")
	case !namePattern.MatchString(p.Name):
		v.add("", 0, "", "stand name %q must match %s: lowercase letters and digits only, no dashes or underscores (it becomes part of every VM name, <owner>-repro-<stand>-<role>)", p.Name, namePattern)
	}
	switch n := len(p.Machines); {
	case n == 0:
		v.add("", 0, "", "the stand has no machines: give at least 1 (machines: [{role, template, steps}])")
	case n > env.MaxMachines:
		v.add("", 0, "", "%d machines: a stand has at most %d", n, env.MaxMachines)
	}
	if !env.Resume && namePattern.MatchString(p.Name) {
		prefix := VMName(env.Owner, p.Name, "")
		var mine []string
		for _, name := range env.Existing {
			if strings.HasPrefix(name, prefix) {
				mine = append(mine, name)
			}
		}
		if len(mine) > 0 {
			sort.Strings(mine)
			v.add("", 0, "", "stand %s exists already: you have %s; destroy it first (stand_destroy {\"stand\": %q, \"confirm\": true}) or pick another name",
				p.Name, listed(mine, 5), p.Name)
		}
	}
	if !env.Resume && env.Building >= env.MaxBuilding {
		v.add("", 0, "", "%d stands are building already (at most %d at once); wait until one is done (stand_status) or stop one (stand_destroy with force: true)",
			env.Building, env.MaxBuilding)
	}
	for i, m := range p.Machines {
		if namePattern.MatchString(m.Role) {
			if _, dup := v.roles[m.Role]; !dup {
				v.roles[m.Role] = i
			}
		}
	}
}

// checkMachine checks a machine's role, VM name and template, and answers
// the full template name.
func (v *validator) checkMachine(i int, m Machine) string {
	where := v.label(i)
	switch first, ok := v.roles[m.Role]; {
	case m.Role == "":
		v.add(where, 0, "", "role is missing: name the machine's part in the stand, like server or ws")
	case !ok:
		v.add(where, 0, "", "role %q must match %s: lowercase letters and digits only, no dashes or underscores (it becomes part of the VM name)", m.Role, namePattern)
	case first != i:
		v.add(where, 0, "", "role %s is machine %d's already: roles must be unique", m.Role, first+1)
	default:
		if namePattern.MatchString(v.plan.Name) {
			if name := VMName(v.env.Owner, v.plan.Name, m.Role); len(name) > maxVMName {
				v.add(where, 0, "", "the VM name %s is %d characters, over the limit of %d (a DNS label): shorten the stand name or the role",
					name, len(name), maxVMName)
			}
		}
	}
	full, problem := resolveTemplate(m.Template, v.env.Templates)
	if problem != "" {
		v.add(where, 0, "", "%s", problem)
	}
	return full
}

// resolveTemplate finds the one template a plan's template names.
func resolveTemplate(want string, all []string) (string, string) {
	var clonable, matches []string
	for _, t := range all {
		if !strings.Contains(t, notForClone) {
			clonable = append(clonable, t)
		}
	}
	sort.Strings(clonable)
	if want == "" {
		return "", "template is missing (templates: " + listed(clonable, 30) + ")"
	}
	if strings.Contains(want, notForClone) {
		return "", fmt.Sprintf("template %s is marked %s and is never cloned: pick another", want, notForClone)
	}
	if slices.Contains(all, want) {
		return want, ""
	}
	for _, t := range clonable {
		if strings.Contains(t, want) {
			matches = append(matches, t)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], ""
	case 0:
		for _, t := range all {
			if strings.Contains(t, want) {
				return "", fmt.Sprintf("template %q matches only %s, which is marked %s and is never cloned: pick another", want, t, notForClone)
			}
		}
		return "", fmt.Sprintf("no template matches %q (templates: %s)", want, listed(clonable, 30))
	}
	return "", fmt.Sprintf("template %q matches %d templates (%s): give one exactly", want, len(matches), listed(matches, 30))
}

// checkStep checks step n of machine i: its kind, its argument, its
// placeholders and, for recipe and script steps, what they call.
func (v *validator) checkStep(i, n int, s Step, timeouts map[string]time.Duration) {
	where := v.label(i)
	k, ok := kindNamed(s.Kind)
	if !ok {
		v.add(where, n, "", "unknown step kind %q (kinds: %s)", s.Kind, kindNames())
		return
	}
	a, probs := k.parse(s.Arg)
	for _, msg := range probs {
		v.add(where, n, s.Kind, "%s", msg)
	}
	seen := map[string]bool{}
	for _, text := range a.texts(s.Kind) {
		for _, seg := range segments(text) {
			if !seg.ph || seen[seg.text] {
				continue
			}
			seen[seg.text] = true
			switch role, isIP := strings.CutPrefix(seg.text, "ip."); {
			case isIP:
				v.refs[i] = append(v.refs[i], ipRef{n, role})
			case seg.text != "vmid" && seg.text != "role" && seg.text != "stand":
				v.add(where, n, s.Kind, "unknown placeholder {{%s}}: a stand's steps know {{vmid}}, {{role}}, {{stand}} and {{ip.<role>}}", seg.text)
			}
		}
	}
	if s.Kind == "recipe" || s.Kind == "script" {
		if len(probs) == 0 || a.name != "" {
			v.checkCall(where, n, s.Kind, a, timeouts)
		}
	}
}

// checkCall checks a recipe or script step against the loaded scripts.
func (v *validator) checkCall(where string, n int, kind string, a args, timeouts map[string]time.Duration) {
	m, ok := v.env.Scripts[a.name]
	switch {
	case !ok && kind == "recipe":
		v.add(where, n, kind, "unknown recipe %q (loaded: %s)", a.name, listed(v.scriptNames(false), 40))
		return
	case !ok:
		v.add(where, n, kind, "unknown script %q (tool scripts: %s)", a.name, listed(v.scriptNames(true), 40))
		return
	case kind == "script" && !m.Tool:
		v.add(where, n, kind, "%s is a recipe (tool: false), not a tool script: call it with {\"recipe\": {\"name\": %q, ...}}", a.name, a.name)
		return
	}
	given := map[string]bool{}
	for _, p := range a.params {
		given[p.name] = true
		if !slices.ContainsFunc(m.Params, func(d runtime.Param) bool { return d.Name == p.name }) {
			v.add(where, n, kind, "unknown param %q of %s %s (it declares %s)", p.name, kind, a.name, m.ParamNames())
		}
	}
	for _, d := range m.Params {
		if d.Default == nil && !given[d.Name] {
			v.add(where, n, kind, "%s %s needs param %q (it declares %s)", kind, a.name, d.Name, m.ParamNames())
		}
	}
	if secs, in := v.longestSleep(a.name, 1, map[string]bool{}); secs > maxSleep {
		also := ""
		if in != a.name {
			also = fmt.Sprintf(", which %s calls", a.name)
		}
		v.add(where, n, kind, "%s %s sleeps %s s (a literal sleep in recipe %s%s): no sleep may be longer than %d s, recipes included",
			kind, a.name, num(secs), in, also, maxSleep)
	}
	timeouts[a.name] = m.Timeout
}

// longestSleep is the longest literal sleep of a script and the recipes it
// calls literally, at most recipeDepth deep, and the script it is in.
func (v *validator) longestSleep(name string, depth int, seen map[string]bool) (float64, string) {
	m, ok := v.env.Scripts[name]
	if !ok || seen[name] || depth > recipeDepth {
		return 0, ""
	}
	seen[name] = true
	defer delete(seen, name)
	best, in := m.MaxSleep, name
	for _, rc := range m.Recipes {
		if s, where := v.longestSleep(rc.Name, depth+1, seen); s > best {
			best, in = s, where
		}
	}
	return best, in
}

// checkRefs checks every {{ip.<role>}} against the boot order and answers
// each machine's needs: the earlier roles it uses, in plan order.
func (v *validator) checkRefs() [][]string {
	needs := make([][]string, len(v.plan.Machines))
	cycles := map[string]bool{}
	for i, refs := range v.refs {
		where := v.label(i)
		uses := map[int]bool{}
		for _, ref := range refs {
			j, known := v.roles[ref.role]
			switch {
			case !known:
				v.add(where, ref.step, v.plan.Machines[i].Steps[ref.step-1].Kind,
					"{{ip.%s}} names no machine of this stand (roles: %s)", ref.role, listed(v.roleList(), 10))
			case j == i:
				v.add(where, ref.step, v.plan.Machines[i].Steps[ref.step-1].Kind,
					"{{ip.%s}} is this machine's own address: a machine may only use earlier machines' addresses (read its own in the guest: ip -4 -o addr show scope global)", ref.role)
			case j > i:
				if path := v.path(j, i); path != nil {
					cycle := append([]int{i, j}, path...)
					key := cycleKey(cycle)
					if !cycles[key] {
						cycles[key] = true
						v.add(where, ref.step, v.plan.Machines[i].Steps[ref.step-1].Kind, "%s", v.cycleMessage(cycle))
					}
					continue
				}
				v.add(where, ref.step, v.plan.Machines[i].Steps[ref.step-1].Kind,
					"{{ip.%s}} is the address of machine %s, which comes later (machine %d of %d): a machine may only use the addresses of machines before it, so move %s before %s",
					ref.role, ref.role, j+1, len(v.plan.Machines), ref.role, where)
			default:
				uses[j] = true
			}
		}
		for j := range v.plan.Machines {
			if uses[j] {
				needs[i] = append(needs[i], v.plan.Machines[j].Role)
			}
		}
	}
	return needs
}

// path answers the machines from one machine to another along {{ip.*}}
// uses (from excluded, to included), or nil when there is none.
func (v *validator) path(from, to int) []int {
	seen := map[int]bool{}
	var visit func(at int) []int
	visit = func(at int) []int {
		if seen[at] {
			return nil
		}
		seen[at] = true
		for _, ref := range v.refs[at] {
			j, ok := v.roles[ref.role]
			if !ok || j == at {
				continue
			}
			if j == to {
				return []int{j}
			}
			if rest := visit(j); rest != nil {
				return append([]int{j}, rest...)
			}
		}
		return nil
	}
	return visit(from)
}

// cycleKey names a cycle by its machines, wherever it is entered.
func cycleKey(cycle []int) string {
	ids := slices.Clone(cycle[:len(cycle)-1])
	slices.Sort(ids)
	return fmt.Sprint(ids)
}

// cycleMessage says a cycle i -> ... -> i of {{ip.*}} uses.
func (v *validator) cycleMessage(cycle []int) string {
	role := func(k int) string { return v.plan.Machines[cycle[k]].Role }
	const fix = "that is a cycle; order the machines so each uses only earlier ones"
	if len(cycle) == 3 {
		return fmt.Sprintf("machines %s and %s need each other's address ({{ip.*}}): %s", role(0), role(1), fix)
	}
	var names, needs []string
	for k := 0; k < len(cycle)-1; k++ {
		names = append(names, role(k))
		needs = append(needs, role(k)+" needs "+role(k+1))
	}
	return fmt.Sprintf("machines %s and %s need each other's addresses ({{ip.*}}: %s): %s",
		strings.Join(names[:len(names)-1], ", "), names[len(names)-1], strings.Join(needs, ", "), fix)
}

func (v *validator) roleList() []string {
	var roles []string
	for _, m := range v.plan.Machines {
		if _, ok := v.roles[m.Role]; ok && !slices.Contains(roles, m.Role) {
			roles = append(roles, m.Role)
		}
	}
	return roles
}

// scriptNames are the loaded scripts' names, sorted; only tools if tools.
func (v *validator) scriptNames(tools bool) []string {
	var names []string
	for name, m := range v.env.Scripts {
		if !tools || m.Tool {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// listed joins names, at most max of them.
func listed(names []string, max int) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > max {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
	}
	return strings.Join(names, ", ")
}

// segment is a piece of a step's text: literal text, or a placeholder's
// inside ("vmid", "ip.server").
type segment struct {
	text string
	ph   bool // text is a placeholder's inside
}

var placeholder = regexp.MustCompile(`\{\{([^{}]*)\}\}`)

// segments splits text at its {{...}} placeholders.
func segments(text string) []segment {
	var out []segment
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(text, -1) {
		if m[0] > last {
			out = append(out, segment{text: text[last:m[0]]})
		}
		out = append(out, segment{text: text[m[2]:m[3]], ph: true})
		last = m[1]
	}
	if last < len(text) {
		out = append(out, segment{text: text[last:]})
	}
	return out
}

// texts are the strings of a step that placeholders are rendered in.
func (a args) texts(kind string) []string {
	switch kind {
	case "exec", "exec_gui":
		return []string{a.command, a.user}
	case "expect":
		out := []string{a.command}
		if a.contains != nil {
			out = append(out, *a.contains)
		}
		return out
	case "screenshot":
		return []string{a.path}
	case "click_label":
		return []string{a.label}
	case "type":
		return []string{a.text}
	case "snapshot", "rollback":
		return []string{a.name}
	case "recipe", "script":
		out := make([]string, len(a.params))
		for i, p := range a.params {
			out[i] = p.value
		}
		return out
	}
	return nil
}
