package engine

import (
	"slices"

	"github.com/poligon/poligon/config"
)

// Toolsets: every session pays for the tool list in tokens, so a server
// offers only the families its operator chose (config.Toolsets names them),
// by default every family its benches can serve. Each tool names its own
// (Def.Toolset); script tools are the scripts family.

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
		if s.offers(t.Toolset) {
			if t.bound != nil {
				t.bound(s.limits())
			}
			s.AddTool(t)
		}
	}
}
