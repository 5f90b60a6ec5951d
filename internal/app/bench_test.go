package app

import (
	"io"
	"log/slog"
	"testing"

	"github.com/poligon/poligon/config"
)

// Benches that name one cluster share its state; others do not.
func TestRootSharesAClusterPerBackend(t *testing.T) {
	r := NewRoot()
	a := r.cluster(config.Bench{Endpoint: config.Endpoint{API: "https://pve1:8006"}, PVEBench: config.PVEBench{BackendID: "lab"}})
	b := r.cluster(config.Bench{Endpoint: config.Endpoint{API: "https://pve2:8006"}, PVEBench: config.PVEBench{BackendID: "lab"}}) // an alias of lab
	c := r.cluster(config.Bench{Endpoint: config.Endpoint{API: "https://PVE1:8006/"}})
	d := r.cluster(config.Bench{Endpoint: config.Endpoint{API: "https://pve1:8006"}})
	if a != b {
		t.Error("two benches with backend_id lab got two clusters")
	}
	if c != d {
		t.Error("one API URL written two ways got two clusters")
	}
	if a == c {
		t.Error("a backend_id and a bare URL share a cluster")
	}
	// The aliases open: pve.New accepts the shared cluster for both.
	for _, bc := range []config.Bench{
		{Name: "one", Type: "pve", Endpoint: config.Endpoint{API: "https://pve1:8006"}, PVEBench: config.PVEBench{BackendID: "lab"}},
		{Name: "two", Type: "pve", Endpoint: config.Endpoint{API: "https://pve2:8006"}, PVEBench: config.PVEBench{BackendID: "lab"}},
	} {
		if _, err := r.Open(bc, testLogger()); err != nil {
			t.Fatalf("open %s: %v", bc.Name, err)
		}
	}
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
