package engine

import (
	"flag"
	"os"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

// TestMain starts building the real-guest templates when the whole
// package runs: their builds (minutes) then pass beside the tests that
// need only tiny, and TestDebian and TestDebianDesktop find them built or
// wait for the build under way.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() && flag.Lookup("test.run").Value.String() == "" {
		go testvm.Prebuild("debian", "debian-desktop")
	}
	os.Exit(m.Run())
}
