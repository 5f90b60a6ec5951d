package app

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
)

// maxOpened bounds the tokens whose consoles the bench closes on close (at
// exit the process closes the rest anyway).
const maxOpened = 1024

// proxmox serves a Proxmox VE cluster. Each caller reaches it with their
// own API token (X-PVE-Token over HTTP; the bench's token or PVE_TOKEN over
// stdio), and the token decides the owner and the pools. A pve.Backend is
// cheap per call: its caches and consoles live in the bench's pve.Cluster,
// per token.
type proxmox struct {
	name  string
	token config.Secret // the bench's own, for trusted transports
	cfg   pve.Config    // without a token

	// One Backend per token seen, to close the consoles that token's calls
	// left open (they are shared by every Backend of the token) on close.
	opened      sync.Map // sha256 of the token -> *pve.Backend
	openedCount atomic.Int64
}

func openPVE(name string, at config.Endpoint, p config.PVEBench, cluster *pve.Cluster, log *slog.Logger) (*proxmox, error) {
	cfg := pve.Config{URL: at.API, CAFile: at.CAFile, BackendID: p.BackendID, Storage: p.Storage, Logger: log,
		Cluster: cluster, ConsoleDump: dumpWriter()}
	// Check the URL, CA and backend id now, so a broken bench stops the
	// server at start instead of failing every call.
	probe := cfg
	probe.Token = "check@pve!config=00000000-0000-0000-0000-000000000000"
	if p.Token != "" {
		probe.Token = p.Token.Reveal()
	}
	if _, err := pve.New(probe); err != nil {
		return nil, err
	}
	return &proxmox{name: name, token: p.Token, cfg: cfg}, nil
}

func (p *proxmox) Open(ctx context.Context, who hostapi.Credentials) (backends.Backend, string, error) {
	token := who.Token
	if !who.Remote && token == "" {
		token = p.token
	}
	if token == "" {
		hint := "send X-PVE-Token: user@realm!tokenid=secret with the request"
		if !who.Remote {
			hint = "set token in the bench's config or PVE_TOKEN in the environment"
		}
		return nil, "", hostapi.Failf(hint, "bench %s needs a Proxmox API token", p.name)
	}
	cfg := p.cfg
	cfg.Token = token.Reveal()
	be, err := pve.New(cfg)
	if err != nil {
		return nil, "", hostapi.Failf("the token looks like user@realm!tokenid=secret", "bench %s: %v", p.name, err)
	}
	if p.openedCount.Load() < maxOpened { // bounded: every distinct token string a client sends
		if _, had := p.opened.LoadOrStore(sha256.Sum256([]byte(cfg.Token)), be); !had {
			p.openedCount.Add(1)
		}
	}
	return be, be.LockKey(), nil
}

func (p *proxmox) Problems() []string { return nil }
func (p *proxmox) Consoles() int      { return 0 }

func (p *proxmox) Facts() map[string]string {
	return map[string]string{"type": "pve"}
}

func (p *proxmox) Close() {
	p.opened.Range(func(_, be any) bool {
		be.(*pve.Backend).CloseConsoles()
		return true
	})
}
