package engine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
)

// bench is one configured place to run VMs. It answers the backend a
// caller reaches it through, and the namespace of its VM locks: locks
// belong to the machine, so everyone on one bench shares them.
type bench struct {
	cfg config.Bench
	// open answers the backend for a caller (Proxmox: per token).
	open     func(ctx context.Context, c Caller) (backends.Backend, string, error)
	check    func() []string
	close    func()
	consoles func() int // open console connections, for /metrics; may be nil
}

func openBench(bc config.Bench, log *slog.Logger) (*bench, error) {
	switch bc.Type {
	case "qemu":
		return openLocalBench(bc, log)
	case "pve":
		return openPVEBench(bc, log)
	}
	return nil, fmt.Errorf("unknown bench type %q", bc.Type)
}

// openLocalBench serves the QEMU driver on this machine.
func openLocalBench(bc config.Bench, log *slog.Logger) (*bench, error) {
	d, err := qemu.New(qemu.Options{DataDir: bc.DataDir, Logger: log.With("bench", bc.Name)})
	if err != nil {
		return nil, err
	}
	ns := "local:" + d.DataDir()
	return &bench{
		cfg: bc,
		open: func(ctx context.Context, c Caller) (backends.Backend, string, error) {
			if c.owner == "" {
				return nil, "", hostapi.Failf("send Authorization: Bearer <token> with a token the server's config maps to an owner",
					"bench %s needs a bearer token: a Proxmox token does not name an owner here", bc.Name)
			}
			return d, ns, nil
		},
		check: func() []string {
			var out []string
			for _, p := range d.Check() {
				out = append(out, p.Error())
			}
			return out
		},
		close:    func() { d.Close() },
		consoles: d.Consoles,
	}, nil
}

func (b *bench) backend(ctx context.Context, c Caller) (backends.Backend, string, error) {
	return b.open(ctx, c)
}
