package app

// The benches: each [[bench]] of the config turned into a live backend (the
// local QEMU driver, a Proxmox cluster, a physical machine) behind
// hostapi.Bench. This is the one place that knows every backend: hostapi and
// the doors see only the Bench interface.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve"
	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
)

// Bench is a configured bench: hostapi.Bench, plus what the doors ask of it
// for readiness, metrics and shutdown. The one declaration of it.
type Bench interface {
	hostapi.Bench
	// Problems lists what keeps the bench from serving (for /readyz).
	Problems() []string
	// Consoles counts open console connections (for /metrics).
	Consoles() int
	// Facts are what an operator should see of the bench (the startup log,
	// /readyz): e.g. the local backend's accelerator and why. No URL, token
	// or host path: /readyz answers may be logged by a proxy.
	Facts() map[string]string
	// Close drops the bench's connections; VMs keep running.
	Close()
}

// Root opens the benches of one process. Benches that name one Proxmox
// cluster (the same backend_id, or the same API URL) share its pve.Cluster:
// its caches, consoles and the record of what each token created.
type Root struct {
	mu       sync.Mutex
	clusters map[string]*pve.Cluster
}

// NewRoot makes a Root with no bench open yet.
func NewRoot() *Root { return &Root{clusters: map[string]*pve.Cluster{}} }

// Open makes the bench bc describes.
func (r *Root) Open(bc config.Bench, log *slog.Logger) (Bench, error) {
	log = log.With("bench", bc.Name)
	switch bc.Type {
	case "qemu":
		return openLocal(bc.Name, bc.QEMUBench, log)
	case "pve":
		return openPVE(bc.Name, bc.Endpoint, bc.PVEBench, r.cluster(bc), log)
	case "pikvm", "bmc":
		return openPhysical(bc, log)
	}
	return nil, fmt.Errorf("unknown bench type %q", bc.Type)
}

func (r *Root) cluster(bc config.Bench) *pve.Cluster {
	key := "url:" + strings.ToLower(strings.TrimRight(strings.TrimSpace(bc.API), "/"))
	if bc.BackendID != "" {
		key = "id:" + bc.BackendID
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clusters[key]
	if !ok {
		c = pve.NewCluster()
		r.clusters[key] = c
	}
	return c
}

// local serves the QEMU driver on this machine.
type local struct {
	name string
	d    *qemu.Driver
	ns   string
}

func openLocal(name string, q config.QEMUBench, log *slog.Logger) (*local, error) {
	d, err := qemu.New(qemu.Options{DataDir: q.DataDir, Accel: q.Accel, Logger: log, ConsoleDump: dumpWriter()})
	if err != nil {
		return nil, err
	}
	return &local{name: name, d: d, ns: "local:" + d.DataDir()}, nil
}

// Open serves every caller with a verified owner: the config's over a
// trusted transport, a bearer token's over HTTP.
func (l *local) Open(ctx context.Context, who hostapi.Credentials) (backends.Backend, string, error) {
	if who.Owner == "" {
		return nil, "", hostapi.Failf("send Authorization: Bearer <token> with a token the server's config maps to an owner",
			"bench %s needs a bearer token: a Proxmox token does not name an owner here", l.name)
	}
	return l.d, l.ns, nil
}

func (l *local) Problems() []string {
	var out []string
	for _, p := range l.d.Check() {
		out = append(out, p.Error())
	}
	return out
}

func (l *local) Consoles() int { return l.d.Consoles() }

func (l *local) Facts() map[string]string {
	return map[string]string{"type": "qemu", "accel": l.d.AccelInfo().String()}
}
func (l *local) Close() { l.d.Close() }
