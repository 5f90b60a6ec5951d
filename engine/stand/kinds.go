package stand

import (
	"encoding/json"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// KindDoc is one step kind as a plan's author (person or planner model)
// reads it: how its argument is written and when the step fails.
type KindDoc struct{ Name, Args, Fails string }

// Kinds documents every step kind, in the order the manual lists them. The
// planner's prompt is written from this table and the validator parses by
// it, so it is the one place a step kind is defined.
var Kinds = kindDocs()

func kindDocs() []KindDoc {
	docs := make([]KindDoc, len(kinds))
	for i, k := range kinds {
		docs[i] = k.KindDoc
	}
	return docs
}

// kind is a step kind: its doc and the parser of its argument, which
// answers the argument read (defaults filled) and what is wrong with it.
type kind struct {
	KindDoc
	parse func(raw json.RawMessage) (args, []string)
}

// args is one step's argument, read. Each kind uses the fields its
// argument has.
type args struct {
	command  string  // exec, exec_gui, expect
	timeout  float64 // exec, expect: seconds
	contains *string // expect
	user     string  // exec_gui
	seconds  float64 // wait_boot, sleep
	path     string  // screenshot ("" = image only)
	xy       []int64 // click: x, y; drag: x1, y1, x2, y2
	button   string  // click, click_label
	count    int64   // click, click_label
	label    string  // click_label
	elem     string  // click_label: the element kind ("type" in the plan)
	text     string  // type
	key      string  // key
	name     string  // snapshot, rollback; recipe, script: the script
	params   []param // recipe, script: in plan order
}

// param is one recipe or script param as written.
type param struct{ name, value string }

// Defaults and limits of the step kinds.
const (
	defaultTimeout = 120  // exec, expect
	maxTimeout     = 3600 // any timeout or wait
	maxSleep       = 600  // sleep, recipes included
	maxType        = 4096 // characters of one type step
	maxCount       = 3    // clicks
)

var (
	keyPattern = regexp.MustCompile(`^[a-z0-9_]+(-[a-z0-9_]+)*$`)
	buttons    = []string{"left", "middle", "right"}
	// elementKinds are the kinds mouse.clickLabel narrows to (stdlib/poligon.d.ts ElementKind).
	elementKinds = []string{"button", "link", "field", "checkbox", "radio", "tab", "menu", "menuitem",
		"list item", "icon", "text", "window", "other"}
)

var kinds = []kind{
	{KindDoc{"exec", `a command string, or {command, timeout=120}`,
		`never fails on the exit code (use expect for that); the command runs as root`}, parseExec},
	{KindDoc{"exec_gui", `{command, user=test}`,
		`the user has no desktop session in the guest`}, parseExecGui},
	{KindDoc{"expect", `{command, timeout=120, contains?}`,
		`exit code ≠ 0, or contains is given and missing from stdout`}, parseExpect},
	{KindDoc{"wait_boot", `seconds (a number, ≤ 3600)`,
		`the guest agent does not answer within that time`}, parseWaitBoot},
	{KindDoc{"sleep", `seconds (a number, ≤ 600)`,
		`never (it just waits; prefer expect or wait_boot)`}, parseSleep},
	{KindDoc{"screenshot", `a path under the evidence directory, or "" for the image only`,
		`the path leaves the evidence directory, or the server has none`}, parseScreenshot},
	{KindDoc{"click", `{x, y, button=left, count=1} (count ≤ 3; console pixels)`,
		`the coordinates are outside the console`}, parseClick},
	{KindDoc{"click_label", `{label, type?, button=left, count=1} — finds the element showing label (OCR, then the vision model; type narrows it: ` +
		strings.Join(elementKinds, ", ") + `) and clicks it`,
		`the label is not found, or several places match equally well`}, parseClickLabel},
	{KindDoc{"drag", `{x1, y1, x2, y2} (left button; console pixels)`,
		`the coordinates are outside the console`}, parseDrag},
	{KindDoc{"type", `text, ≤ 4096 characters`,
		`never once valid (the text is typed key by key, US layout)`}, parseType},
	{KindDoc{"key", `a qemu sendkey name: ret, tab, esc, ctrl-alt-f2, alt-f2, ctrl-c, ...`,
		`the backend rejects the key name`}, parseKey},
	{KindDoc{"snapshot", `a snapshot name`,
		`the backend's snapshot task fails`}, parseName},
	{KindDoc{"rollback", `a snapshot name (the VM restarts from it)`,
		`there is no such snapshot, or the task fails`}, parseName},
	{KindDoc{"recipe", `{name, <param>: <value>, ...} — runs a loaded recipe (or script) on this machine; params are strings beside name`,
		`the recipe fails (unknown recipes and params are refused before anything is built)`}, parseRecipe},
	{KindDoc{"script", `{name, params: {<param>: <value>, ...}} — runs a loaded tool script (vm_<name>) on this machine`,
		`the script fails (unknown scripts and params are refused before anything is built)`}, parseScript},
}

// kindNamed answers the kind called name.
func kindNamed(name string) (kind, bool) {
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return kind{}, false
}

func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	return strings.Join(names, ", ")
}

func parseExec(raw json.RawMessage) (args, []string) {
	if jsonType(raw) == "a string" {
		var a args
		var probs []string
		a.command = readCommand(raw, "exec", &probs)
		a.timeout = defaultTimeout
		return a, probs
	}
	o := newObject(raw, "a command string, or {command, timeout=120}", "command", "timeout")
	a := args{command: o.command(), timeout: o.seconds("timeout", defaultTimeout, maxTimeout)}
	return a, o.probs
}

func parseExecGui(raw json.RawMessage) (args, []string) {
	o := newObject(raw, "{command, user=test}", "command", "user")
	a := args{command: o.command(), user: o.str("user", "test")}
	if a.user == "" {
		o.problem("user is empty (leave it out for test)")
	}
	return a, o.probs
}

func parseExpect(raw json.RawMessage) (args, []string) {
	o := newObject(raw, "{command, timeout=120, contains?}", "command", "timeout", "contains")
	a := args{command: o.command(), timeout: o.seconds("timeout", defaultTimeout, maxTimeout)}
	if o.has("contains") {
		c := o.str("contains", "")
		a.contains = &c
	}
	return a, o.probs
}

func parseWaitBoot(raw json.RawMessage) (args, []string) {
	var probs []string
	return args{seconds: readSeconds(raw, "seconds", maxTimeout, &probs)}, probs
}

func parseSleep(raw json.RawMessage) (args, []string) {
	var probs []string
	s := readSeconds(raw, "seconds", math.Inf(1), &probs)
	if s > maxSleep {
		probs = append(probs, fmt.Sprintf("sleep %s s is longer than the limit of %d s: wait for the condition instead (expect with a timeout, wait_boot)", num(s), maxSleep))
	}
	return args{seconds: s}, probs
}

func parseScreenshot(raw json.RawMessage) (args, []string) {
	var a args
	var probs []string
	if err := stringValue(raw, &a.path); err != nil {
		return a, []string{fmt.Sprintf(`the argument must be a path string (or "" for the image only), not %v`, err)}
	}
	if a.path != "" {
		clean := path.Clean(strings.ReplaceAll(a.path, `\`, "/"))
		if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			probs = append(probs, fmt.Sprintf("path %q leaves the evidence directory: give a relative path inside it, like shots/login.png", a.path))
		}
	}
	return a, probs
}

func parseClick(raw json.RawMessage) (args, []string) {
	o := newObject(raw, "{x, y, button=left, count=1}", "x", "y", "button", "count")
	a := args{xy: []int64{o.coord("x"), o.coord("y")}, button: o.button(), count: o.count()}
	return a, o.probs
}

func parseClickLabel(raw json.RawMessage) (args, []string) {
	o := newObject(raw, "{label, type?, button=left, count=1}", "label", "type", "button", "count")
	a := args{label: o.required("label"), button: o.button(), count: o.count()}
	if o.has("type") {
		a.elem = o.str("type", "")
		if jsonType(o.fields["type"]) == "a string" && !slices.Contains(elementKinds, a.elem) {
			o.problem(fmt.Sprintf("type %q is not an element kind (one of: %s)", a.elem, strings.Join(elementKinds, ", ")))
		}
	}
	return a, o.probs
}

func parseDrag(raw json.RawMessage) (args, []string) {
	o := newObject(raw, "{x1, y1, x2, y2}", "x1", "y1", "x2", "y2")
	return args{xy: []int64{o.coord("x1"), o.coord("y1"), o.coord("x2"), o.coord("y2")}}, o.probs
}

func parseType(raw json.RawMessage) (args, []string) {
	var a args
	if err := stringValue(raw, &a.text); err != nil {
		return a, []string{fmt.Sprintf("the argument must be the text to type, a string, not %v", err)}
	}
	switch n := utf8.RuneCountInString(a.text); {
	case n == 0:
		return a, []string{"the text is empty"}
	case n > maxType:
		return a, []string{fmt.Sprintf("the text is %d characters; at most %d fit one step: split it", n, maxType)}
	}
	return a, nil
}

func parseKey(raw json.RawMessage) (args, []string) {
	var a args
	if err := stringValue(raw, &a.key); err != nil {
		return a, []string{fmt.Sprintf(`the argument must be a qemu sendkey name like "ret" or "ctrl-alt-f2", not %v`, err)}
	}
	if !keyPattern.MatchString(a.key) {
		return a, []string{fmt.Sprintf(`%q is not a qemu sendkey name: lowercase names joined by "-", like ret, tab, esc, ctrl-alt-f2 (type text with a type step)`, a.key)}
	}
	return a, nil
}

func parseName(raw json.RawMessage) (args, []string) {
	var a args
	if err := stringValue(raw, &a.name); err != nil {
		return a, []string{fmt.Sprintf("the argument must be a snapshot name, a string, not %v", err)}
	}
	if strings.TrimSpace(a.name) == "" {
		return a, []string{"the snapshot name is empty"}
	}
	return a, nil
}

// parseRecipe reads {name, <param>: "<value>", ...}; whether the recipe
// and its params exist is the validator's (it knows the loaded scripts).
func parseRecipe(raw json.RawMessage) (args, []string) {
	const form = "{name, <param>: <value>, ...}"
	fields, err := objectFields(raw)
	if err != nil {
		return args{}, []string{fmt.Sprintf("the argument must be an object %s, not %v", form, err)}
	}
	var a args
	var probs []string
	named := false
	for _, f := range fields {
		var v string
		if err := stringValue(f.val, &v); err != nil {
			what := "param " + f.key
			if f.key == "name" {
				what = "name"
			}
			probs = append(probs, fmt.Sprintf("%s must be a string, not %s (every recipe param is a string, like \"5\")", what, shownParam(f.key, f.val)))
			continue
		}
		if f.key == "name" {
			a.name, named = v, true
			continue
		}
		a.params = append(a.params, param{f.key, v})
	}
	if !named {
		probs = append(probs, "name is missing: "+form)
	}
	return a, probs
}

// parseScript reads {name, params: {<param>: "<value>", ...}}.
func parseScript(raw json.RawMessage) (args, []string) {
	o := newObject(raw, "{name, params: {<param>: <value>, ...}}", "name", "params")
	a := args{name: o.required("name")}
	if v, ok := o.fields["params"]; ok {
		fields, err := objectFields(v)
		if err != nil {
			o.problem(fmt.Sprintf("params must be an object {<param>: <value>, ...}, not %v", err))
		}
		for _, f := range fields {
			var s string
			if err := stringValue(f.val, &s); err != nil {
				o.problem(fmt.Sprintf("param %s must be a string, not %s", f.key, shownParam(f.key, f.val)))
				continue
			}
			a.params = append(a.params, param{f.key, s})
		}
	}
	return a, o.probs
}

// object reads one step's argument object, collecting what is wrong.
type object struct {
	fields map[string]json.RawMessage
	probs  []string
	bad    bool // not an object: missing keys are not worth saying
}

func newObject(raw json.RawMessage, form string, known ...string) *object {
	o := &object{fields: map[string]json.RawMessage{}}
	fields, err := objectFields(raw)
	if err != nil {
		o.problem(fmt.Sprintf("the argument must be %s, not %v", form, err))
		o.bad = true
		return o
	}
	for _, f := range fields {
		if !slices.Contains(known, f.key) {
			o.problem(fmt.Sprintf("unknown key %q (the argument is %s)", f.key, form))
			continue
		}
		o.fields[f.key] = f.val
	}
	return o
}

func (o *object) problem(msg string) { o.probs = append(o.probs, msg) }

func (o *object) has(key string) bool { _, ok := o.fields[key]; return ok }

// str reads a string key, def when absent.
func (o *object) str(key, def string) string {
	raw, ok := o.fields[key]
	if !ok {
		return def
	}
	var s string
	if err := stringValue(raw, &s); err != nil {
		o.problem(fmt.Sprintf("%s must be a string, not %s", key, shown(raw)))
		return def
	}
	return s
}

// required reads a string key that must be there and not be empty.
func (o *object) required(key string) string {
	if !o.present(key) {
		return ""
	}
	s := o.str(key, "")
	if s == "" && jsonType(o.fields[key]) == "a string" {
		o.problem(key + " is empty")
	}
	return s
}

// present says whether a required key is there, and says so when not.
func (o *object) present(key string) bool {
	if o.has(key) {
		return true
	}
	if !o.bad {
		o.problem(key + " is missing")
	}
	return false
}

func (o *object) command() string {
	if !o.present("command") {
		return ""
	}
	return readCommand(o.fields["command"], "command", &o.probs)
}

// seconds reads a number of seconds in (0, max], def when absent.
func (o *object) seconds(key string, def, max float64) float64 {
	raw, ok := o.fields[key]
	if !ok {
		return def
	}
	return readSeconds(raw, key, max, &o.probs)
}

// coord reads a required console coordinate: an integer ≥ 0.
func (o *object) coord(key string) int64 {
	if !o.present(key) {
		return 0
	}
	raw := o.fields[key]
	v, ok := integer(raw)
	if !ok || v < 0 {
		o.problem(fmt.Sprintf("%s must be a whole number of console pixels ≥ 0, not %s", key, shown(raw)))
		return 0
	}
	return v
}

func (o *object) button() string {
	b := o.str("button", "left")
	if !slices.Contains(buttons, b) {
		o.problem(fmt.Sprintf("button %q is not left, middle or right", b))
	}
	return b
}

func (o *object) count() int64 {
	raw, ok := o.fields["count"]
	if !ok {
		return 1
	}
	v, ok := integer(raw)
	if !ok || v < 1 || v > maxCount {
		o.problem(fmt.Sprintf("count must be 1, 2 or 3 (clicks), not %s", shown(raw)))
		return 1
	}
	return v
}

func readCommand(raw json.RawMessage, what string, probs *[]string) string {
	var s string
	if err := stringValue(raw, &s); err != nil {
		*probs = append(*probs, fmt.Sprintf("%s must be a string, not %v", what, err))
		return ""
	}
	if strings.TrimSpace(s) == "" {
		*probs = append(*probs, what+" is empty")
	}
	return s
}

// readSeconds reads a JSON number of seconds in (0, max].
func readSeconds(raw json.RawMessage, what string, max float64, probs *[]string) float64 {
	var v float64
	if jsonType(raw) != "a number" || json.Unmarshal(raw, &v) != nil {
		*probs = append(*probs, fmt.Sprintf("%s must be a number of seconds, not %s", what, shown(raw)))
		return 0
	}
	if v <= 0 {
		*probs = append(*probs, fmt.Sprintf("%s must be more than 0, not %s", what, num(v)))
		return 0
	}
	if v > max {
		*probs = append(*probs, fmt.Sprintf("%s must be at most %s, not %s", what, num(max), num(v)))
		return 0
	}
	return v
}

// integer reads a JSON number that is a whole number.
func integer(raw json.RawMessage) (int64, bool) {
	var v float64
	if jsonType(raw) != "a number" || json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
		return 0, false
	}
	return int64(v), true
}

// shown is a JSON value as an error quotes it: its type, and short values themselves.
func shown(raw json.RawMessage) string {
	t := jsonType(raw)
	if t == "a number" || t == "a boolean" || t == "null" {
		return strings.TrimSpace(string(raw))
	}
	if t == "a string" && len(raw) <= 40 {
		return t + " (" + strings.TrimSpace(string(raw)) + ")"
	}
	return t
}

// shownParam is shown, but only the type of a value that may be a secret.
func shownParam(name string, raw json.RawMessage) string {
	if secretName(name) {
		return jsonType(raw)
	}
	return shown(raw)
}

// num writes a number as JavaScript and the plan would: 120, 2.5.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
