package engine

import (
	"slices"
	"strings"

	"github.com/poligon/poligon/config"
)

// Toolsets: every session pays for the tool list in tokens, so a server
// offers only the families its operator chose (config.Toolsets names them),
// by default every family its benches can serve.

// toolsetExceptions are the built-in tools whose family is not their name's
// prefix: installing from an ISO is its own family.
var toolsetExceptions = map[string]string{
	"vm_create_iso":  "iso",
	"vm_eject":       "iso",
	"vm_disk_add":    "iso",
	"vm_disk_resize": "iso",
	"storage_list":   "bench",
}

// toolsetOf answers the family of a built-in tool: vm, ui, iso, stand or
// bench. Script tools (vm_<name>) are the scripts family, decided where
// they are registered, since their names look like built-in ones.
func toolsetOf(name string) string {
	if f, ok := toolsetExceptions[name]; ok {
		return f
	}
	prefix, _, _ := strings.Cut(name, "_")
	return prefix
}

// Toolsets answers the families this server offers, in config.Toolsets
// order: cfg.Server.Toolsets, or when empty every family but bench, which
// comes only with a physical bench (its tools act on physical machines).
func (s *Server) Toolsets() []string { return offeredToolsets(s.cfg) }

func offeredToolsets(cfg *config.Config) []string {
	var out []string
	for _, f := range config.Toolsets {
		switch {
		case len(cfg.Server.Toolsets) > 0:
			if slices.Contains(cfg.Server.Toolsets, f) {
				out = append(out, f)
			}
		case f != "bench" || hasPhysical(cfg):
			out = append(out, f)
		}
	}
	return out
}

// offers reports whether the server offers the family.
func (s *Server) offers(family string) bool {
	return slices.Contains(offeredToolsets(s.cfg), family)
}

// addBuiltinTools registers the built-in tools of the offered families.
func (s *Server) addBuiltinTools() {
	for _, t := range builtinTools() {
		if s.offers(toolsetOf(t.Name)) {
			if t.bound != nil {
				t.bound(s.limits())
			}
			s.AddTool(t)
		}
	}
}
