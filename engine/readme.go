package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/poligon/poligon/config"
)

// The README's tools table and toolset list are made from the tools'
// definitions (Def), as the schema files are: `go generate ./engine`
// rewrites them and TestREADMETools fails when they drift.
//
//go:generate env UPDATE_GOLDEN=1 go test -count=1 -run ^(TestSchemasGolden|TestREADMETools)$ .

// The marks around each generated part of the README.
const (
	toolsTableBegin = "<!-- tools table: made by go generate ./engine from each tool's Def -->"
	toolsTableEnd   = "<!-- end of tools table -->"
	toolsetsBegin   = "<!-- toolsets: made by go generate ./engine from each tool's Def -->"
	toolsetsEnd     = "<!-- end of toolsets -->"
)

// docTools are the tools the README lists: the built-in ones in their
// families' order, then the shipped scripts' tools by name.
func (s *Server) docTools() []*Tool {
	var out []*Tool
	for _, family := range config.Toolsets {
		for _, t := range builtinTools() {
			if t.Toolset == family {
				got, _ := s.Tool(t.Name)
				out = append(out, got)
			}
		}
	}
	for _, name := range s.ToolNames() {
		if t, _ := s.Tool(name); t.Toolset == "scripts" {
			out = append(out, t)
		}
	}
	return slices.DeleteFunc(out, func(t *Tool) bool { return t == nil })
}

// toolsTable renders the tools table: a row a tool with its arguments
// (name=default, name? when optional) and its summary.
func (s *Server) toolsTable() string {
	var b strings.Builder
	b.WriteString("| Tool | Arguments | What it does |\n|---|---|---|\n")
	for _, t := range s.docTools() {
		params := t.params
		if t.Toolset == "bench" && !t.NoBench {
			// Here the bench argument is what the tool acts on.
			params = append([]param{benchParam}, params...)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, argsLine(params), t.Summary)
	}
	return b.String()
}

// argsLine is a tool's arguments as the table shows them.
func argsLine(params []param) string {
	var out []string
	for _, p := range params {
		switch {
		case p.required:
			out = append(out, p.name)
		case p.def != nil && p.def != false: // a flag that is off is just optional
			out = append(out, fmt.Sprintf("%s=%v", p.name, p.def))
		default:
			out = append(out, p.name+"?")
		}
	}
	if len(out) == 0 {
		return "—"
	}
	return strings.Join(out, ", ")
}

// toolsetsTable renders the families and their tools, with when a server
// offers each by default.
func (s *Server) toolsetsTable() string {
	by := map[string][]string{}
	for _, t := range s.docTools() {
		by[t.Toolset] = append(by[t.Toolset], t.Name)
	}
	when := map[string]string{
		"bench":   "with a physical bench",
		"scripts": "yes: the shipped scripts and those of the scripts directory",
	}
	var b strings.Builder
	b.WriteString("| Toolset | Offered by default | Tools |\n|---|---|---|\n")
	for _, f := range config.Toolsets {
		w := when[f]
		if w == "" {
			w = "yes"
		}
		tools := strings.Join(by[f], ", ")
		if tools == "" {
			tools = "—"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", f, w, tools)
	}
	return b.String()
}

// spliceREADME answers readme with the text between begin and end
// replaced by body, and whether both marks were found.
func spliceREADME(readme, begin, end, body string) (string, bool) {
	i := strings.Index(readme, begin)
	j := strings.Index(readme, end)
	if i < 0 || j < i {
		return readme, false
	}
	return readme[:i+len(begin)] + "\n" + body + readme[j:], true
}
