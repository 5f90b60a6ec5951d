package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// TestREADMETools holds the README's tools table and toolset list to the
// tools' definitions; UPDATE_GOLDEN=1 (go generate ./engine) rewrites them.
func TestREADMETools(t *testing.T) {
	s, _ := newServer(t, fullSurface(testConfig(t, testvm.ShortTempDir(t))))
	path := filepath.Join(testvm.Root(), "README.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	for _, part := range []struct{ name, begin, end, body string }{
		{"tools table", toolsTableBegin, toolsTableEnd, s.toolsTable()},
		{"toolsets", toolsetsBegin, toolsetsEnd, s.toolsetsTable()},
	} {
		next, ok := spliceREADME(readme, part.begin, part.end, part.body)
		if !ok {
			t.Fatalf("README.md has no %s between %q and %q", part.name, part.begin, part.end)
		}
		if next != readme && os.Getenv("UPDATE_GOLDEN") == "" {
			t.Errorf("README.md's %s is not what the tools define: run go generate ./engine and review the diff", part.name)
		}
		readme = next
	}
	if os.Getenv("UPDATE_GOLDEN") != "" && readme != string(raw) {
		if err := os.WriteFile(path, []byte(readme), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
