package app

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// The layers call only down. For each layer, the packages below it may not
// depend (directly or not) on those above: the import graph says so, not a
// review. A forbidden path ending in /... is a subtree, else one package.
func TestLayersCallOnlyDown(t *testing.T) {
	const mod = "github.com/poligon/poligon/"
	rules := []struct {
		pkgs   string   // a go list pattern
		direct bool     // only its own imports (a door's deps include the app's)
		forbid []string // import paths (after the module's)
		why    string
	}{
		{"./hostapi/...", false, []string{"config", "internal/store", "internal/app", "backends/ocr/...", "backends/vision/...",
			"backends/qemu/...", "backends/pve/...", "backends/pikvm/...", "backends/bmc/...", "engine/...", "runtime/...", "cmd/..."},
			"hostapi declares the interfaces it needs; the app serves them"},
		{"./backends/...", false, []string{"hostapi/...", "engine/...", "runtime/...", "internal/app", "config", "cmd/..."},
			"backends know nothing of callers, scripts or the config"},
		{"./runtime/...", false, []string{"hostapi", "engine/...", "internal/app", "backends/...", "config", "cmd/..."},
			"a runtime knows only its Host"},
		{"./engine/catalog", false, []string{"engine", "engine/stand", "internal/app", "cmd/...", "backends/qemu/...", "backends/pve/..."},
			"the catalog serves every door"},
		{"./engine/stand", false, []string{"engine", "internal/app", "cmd/...", "backends/qemu/...", "backends/pve/..."},
			"the stand service serves every door"},
		{"./internal/store", false, []string{"hostapi/...", "engine/...", "runtime/...", "backends/...", "config", "internal/app"},
			"a leaf"},
		{"./internal/trace", false, []string{"hostapi", "engine/...", "runtime/js", "runtime/wasm", "backends/...", "config", "internal/app"},
			"what the doors and services record into"},
		{"./internal/dataset/...", false, []string{"hostapi/...", "engine/...", "runtime/...", "backends/...", "config", "internal/app"},
			"a leaf"},
		{"./engine", true, []string{"cmd/...", "backends/qemu", "backends/pve", "backends/pikvm", "backends/bmc", "backends/ocr"},
			"a door reaches the backends through the app"},
		{"./web", true, []string{"cmd/...", "engine", "backends/qemu", "backends/pve", "backends/pikvm", "backends/bmc", "backends/ocr"},
			"a door reaches the backends through the app, and no other door"},
	}
	root := testvm.Root()
	for _, r := range rules {
		format := "{{.ImportPath}}"
		args := []string{"list", "-deps", "-f", format, r.pkgs}
		if r.direct {
			args = []string{"list", "-f", `{{join .Imports " "}}`, r.pkgs}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", r.pkgs, err)
		}
		own := strings.TrimPrefix(strings.TrimSuffix(r.pkgs, "/..."), "./")
		for _, dep := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(dep, mod)
			if !ok || strings.HasPrefix(rel, own) || strings.HasSuffix(rel, "test") || strings.Contains(rel, "test/") {
				continue
			}
			for _, f := range r.forbid {
				tree, isTree := strings.CutSuffix(f, "/...")
				if rel == tree || isTree && strings.HasPrefix(rel, tree+"/") {
					t.Errorf("%s depends on %s: %s", r.pkgs, rel, r.why)
				}
			}
		}
	}
}
