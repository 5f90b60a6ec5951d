package engine

import (
	"runtime/debug"
	"sync"
)

// What the binary was built from. A build from a git checkout knows its
// commit and whether the tree had changes (Go records them); a build
// without .git (the container's) gets them from -ldflags:
//
//	-X github.com/poligon/poligon/engine.Version=0.3.0
//	-X github.com/poligon/poligon/engine.Commit=<40 hex>
//	-X github.com/poligon/poligon/engine.TreeState=clean|modified
var (
	Version   = "dev"
	Commit    = ""
	TreeState = ""
)

// Build is what `poligon version`, the startup log and /healthz say.
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit"` // full; "unknown" outside a git build
	Clean   bool   `json:"clean"`  // the tree had no uncommitted changes
}

// BuildInfo answers the binary's version, commit and tree state.
var BuildInfo = sync.OnceValue(func() Build {
	b := Build{Version: Version, Commit: Commit, Clean: TreeState == "clean"}
	if b.Commit != "" {
		return b
	}
	b.Commit = "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		modified := true
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		b.Clean = b.Commit != "unknown" && !modified
	}
	return b
})
