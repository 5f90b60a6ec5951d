package stand

import (
	_ "embed"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ShippedNotes are the planner's rules about the guests (ALT facts that
// live runs taught); `[planner] notes = "path"` replaces them.
//
//go:embed planner_notes.md
var ShippedNotes string

// LoadNotes answers the notes at path, or the shipped ones for "".
func LoadNotes(path string) (string, error) {
	if path == "" {
		return ShippedNotes, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("planner notes: %v (set [planner] notes to a readable text file, or leave it out for the shipped notes)", err)
	}
	return string(b), nil
}

// exampleBlock is the manual's two-machine stand.
const exampleBlock = `{"name": "nginxws",
 "machines": [
   {"role": "server",
    "template": "p11-server-11.1-x86-64-legacy-ext4-textmode-server",
    "steps": [{"recipe": {"name": "install", "packages": "nginx"}},
              {"recipe": {"name": "enable_service", "service": "nginx"}}]},
   {"role": "ws",
    "template": "kworkstation-11.4",
    "steps": [{"expect": {"command": "curl -s http://{{ip.server}}/", "contains": "html"}},
              {"recipe": {"name": "lightdm_login"}}]}],
 "notes": "free text for the person who asked, never executed"}`

// SystemPrompt is the planner's one system prompt: the plan format, the
// step kinds, placeholders and limits, the recipes, the notes and the live
// templates. The same env and notes give the same text (lists are sorted).
func SystemPrompt(env Env, notes string) string {
	maxMachines := env.MaxMachines
	if maxMachines <= 0 {
		maxMachines = 4
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	w("You write stand plans for poligon. A stand is 1-%d virtual machines cloned from existing templates, booted in the order listed and set up by step lists.\n\n", maxMachines)
	w("Answer with exactly one JSON object, the plan, and nothing else: no prose, no code fence, no comments.\n")
	w("If the goal cannot be built from the templates listed below, answer {\"error\": \"why\"} instead.\n\n")

	w("# Plan format\n\nAn example (its templates are examples: use only names from the template list below):\n\n%s\n\n", exampleBlock)
	w("- name and every role match ^[a-z][a-z0-9]*$: lowercase letters and digits only, no underscores, no dashes.\n")
	owner := env.Owner
	if owner == "" {
		owner = "<owner>"
	}
	w("- Each machine becomes the VM %s-repro-<name>-<role>; that whole name must fit in 63 characters.\n", owner)
	w("- template is an exact template name or a substring that matches exactly one template.\n")
	w("- steps run in order; each step is an object with exactly one key, the step kind, whose value is its argument.\n")
	w("- notes is free text for the person who asked (what the stand is for, what to check by hand); it is never executed.\n")
	w("- The only keys are name, machines and notes; a machine has only role, template and steps.\n\n")

	w("# Step kinds\n\n")
	for _, k := range Kinds {
		w("- %s: %s", k.Name, k.Args)
		if k.Fails != "" {
			w(" (fails when: %s)", k.Fails)
		}
		w("\n")
	}
	w("\nThe first failing step stops the stand.\n\n")

	w("# Placeholders\n\nAny string in a step may use {{vmid}}, {{role}}, {{stand}} and {{ip.<role>}}, the first global IPv4 address of another machine. ")
	w("A machine may only use {{ip.<role>}} of a machine listed before it (that is the boot order), never its own. No other placeholders exist.\n\n")

	w("# Limits\n\nAt most %d machines. No sleep longer than %d seconds, recipes included. Everything is checked before a single VM is cloned.\n\n", maxMachines, maxSleep)

	w("# Recipes\n\nA recipe step is {\"recipe\": {\"name\": \"<recipe>\", \"<param>\": \"<value>\", ...}}; every value is a string. A param without a default is required; no other params exist.\n\n")
	for _, name := range slices.Sorted(maps.Keys(env.Scripts)) {
		m := env.Scripts[name]
		w("- %s: %s", name, foldSpace(m.Description))
		if m.Tool {
			w(" (also a tool: the script step kind runs it too)")
		}
		w("\n")
		for _, p := range m.Params {
			w("  - %s", p.Name)
			if p.Default != nil {
				w(" = %s", strconv.Quote(*p.Default))
			} else {
				w(" (required)")
			}
			if d := foldSpace(p.Description); d != "" {
				w(": %s", d)
			}
			w("\n")
		}
	}
	if len(env.Scripts) == 0 {
		w("(none loaded)\n")
	}

	if n := strings.TrimSpace(notes); n != "" {
		w("\n# Notes\n\n%s\n", n)
	}

	w("\n# Templates\n\nThe only templates a stand can clone:\n\n")
	shown := 0
	for _, t := range slices.Sorted(slices.Values(env.Templates)) {
		if strings.Contains(t, "not-for-clone") {
			continue
		}
		w("- %s\n", t)
		shown++
	}
	if shown == 0 {
		w("(none: answer {\"error\": \"no templates to clone\"})\n")
	}
	return b.String()
}

// retryPrompt sends the validator's complaints back.
func retryPrompt(problems []string) string {
	var b strings.Builder
	b.WriteString("Your plan has these problems:\n")
	for _, p := range problems {
		b.WriteString("- ")
		b.WriteString(p)
		b.WriteByte('\n')
	}
	b.WriteString("Answer the corrected plan only: one JSON object, nothing else. If the goal cannot be built from the templates listed, answer {\"error\": \"why\"}.")
	return b.String()
}

// foldSpace folds a description onto one line.
func foldSpace(s string) string { return strings.Join(strings.Fields(s), " ") }
