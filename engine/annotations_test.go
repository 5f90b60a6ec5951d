package engine

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/internal/testvm"
)

// The hints each effect gives a client: read-only is never destructive and
// always idempotent; the spec's defaults (destructive, open world) are never
// left to apply, every hint is stated.
func TestEffectAnnotations(t *testing.T) {
	for _, tc := range []struct {
		e    Effect
		want mcp.ToolAnnotations
	}{
		{readOnly("r"), mcp.ToolAnnotations{Title: "T", ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}},
		{readOnly("r").reaching(), mcp.ToolAnnotations{Title: "T", ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(true)}},
		{additive("a"), mcp.ToolAnnotations{Title: "T", DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}},
		{additiveOnce("a"), mcp.ToolAnnotations{Title: "T", IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}},
		{destructive("d"), mcp.ToolAnnotations{Title: "T", DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}},
		{destructiveOnce("d"), mcp.ToolAnnotations{Title: "T", IdempotentHint: true, DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}},
		{runsInGuest("g"), mcp.ToolAnnotations{Title: "T", DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}},
	} {
		got := tc.e.annotations("T")
		if got.Title != tc.want.Title || got.ReadOnlyHint != tc.want.ReadOnlyHint || got.IdempotentHint != tc.want.IdempotentHint ||
			*got.DestructiveHint != *tc.want.DestructiveHint || *got.OpenWorldHint != *tc.want.OpenWorldHint {
			t.Errorf("%+v: %+v, want %+v", tc.e, got, tc.want)
		}
	}
}

// Every registered tool, built-in and shipped script, declares what it
// does to the world with a reason, a title, a summary for the README and a
// toolset; its listed annotations are its effect's.
func TestEveryToolDescribesItself(t *testing.T) {
	s, _ := newServer(t, fullSurface(testConfig(t, testvm.ShortTempDir(t))))
	for _, name := range s.ToolNames() {
		tool, _ := s.Tool(name)
		if tool.Effect.Why == "" || tool.Effect.Class == "" {
			t.Errorf("%s: no effect with a reason: classify it (read-only, additive or destructive; idempotent; open world)", name)
		}
		if tool.Title == "" || tool.def().Title != tool.Title || tool.Annotations.Title != tool.Title {
			t.Errorf("%s: title %q, listed as %q: every tool needs one", name, tool.Title, tool.def().Title)
		}
		if tool.Summary == "" || tool.Toolset == "" {
			t.Errorf("%s: summary %q, toolset %q: the README's row and the toolset list need both", name, tool.Summary, tool.Toolset)
		}
		want := tool.Effect.annotations(tool.Title)
		if got := tool.Annotations; got.ReadOnlyHint != want.ReadOnlyHint || got.IdempotentHint != want.IdempotentHint ||
			*got.DestructiveHint != *want.DestructiveHint || *got.OpenWorldHint != *want.OpenWorldHint {
			t.Errorf("%s: annotated %+v, its effect says %+v", name, got, want)
		}
	}
}
