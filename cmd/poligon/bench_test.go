package main

import (
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// TestBenchVerbs: poligon bench runs the bench tools in process; a bench
// that is no physical machine, and a verb with the wrong arguments, say so.
func TestBenchVerbs(t *testing.T) {
	e := env(t, testvm.ShortTempDir(t))
	out, errOut, code := poligon(t, e, "bench", "status")
	if code != 0 || !strings.HasPrefix(out, "name\ttype\tapi\tusable\tlease\tpower\tdescription\nlocal\tqemu\t") {
		t.Fatalf("bench status = exit %d:\n%s%s", code, out, errOut)
	}
	if _, errOut, code := poligon(t, e, "bench", "lease", "local", "10"); code != 1 || !strings.Contains(errOut, "error: this bench is not a physical machine") {
		t.Errorf("bench lease local = exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"bench"}, {"bench", "power", "kvm1"}, {"bench", "lease", "kvm1", "soon"}, {"bench", "status", "--confirm"}} {
		if _, errOut, code := poligon(t, e, args...); code != 2 {
			t.Errorf("poligon %s = exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
}
