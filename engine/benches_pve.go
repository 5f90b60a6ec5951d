package engine

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

// openPVEBench serves a Proxmox VE cluster. Each caller reaches it with
// their own API token (X-PVE-Token over HTTP; the bench's token or
// PVE_TOKEN over stdio), and the token decides the owner and the pools. A
// pve.Backend is cheap per call: its caches, consoles and locks live in
// state shared per endpoint (or backend_id) and token.
func openPVEBench(bc config.Bench, log *slog.Logger) (*bench, error) {
	cfg := pve.Config{URL: bc.API, CAFile: bc.CAFile, BackendID: bc.BackendID, Storage: bc.Storage, Logger: log.With("bench", bc.Name)}
	// Check the URL, CA and backend id now, so a broken bench stops the
	// server at start instead of failing every call.
	probe := cfg
	probe.Token = "check@pve!config=00000000-0000-0000-0000-000000000000"
	if bc.Token != "" {
		probe.Token = bc.Token.Reveal()
	}
	if _, err := pve.New(probe); err != nil {
		return nil, err
	}
	// One Backend per token seen, to close the consoles that token's calls
	// left open (they are shared by every Backend of the token) on close.
	var opened sync.Map // sha256 of the token -> *pve.Backend
	var openedCount atomic.Int64
	return &bench{
		cfg: bc,
		open: func(ctx context.Context, c Caller) (backends.Backend, string, error) {
			token := c.pveToken
			if !c.http && token == "" {
				token = bc.Token
			}
			if token == "" {
				hint := "send X-PVE-Token: user@realm!tokenid=secret with the request"
				if !c.http {
					hint = "set token in the bench's config or PVE_TOKEN in the environment"
				}
				return nil, "", hostapi.Failf(hint, "bench %s needs a Proxmox API token", bc.Name)
			}
			cfg := cfg
			cfg.Token = token.Reveal()
			be, err := pve.New(cfg)
			if err != nil {
				return nil, "", hostapi.Failf("the token looks like user@realm!tokenid=secret", "bench %s: %v", bc.Name, err)
			}
			if openedCount.Load() < maxOpened { // bounded: every distinct token string a client sends
				if _, had := opened.LoadOrStore(sha256.Sum256([]byte(cfg.Token)), be); !had {
					openedCount.Add(1)
				}
			}
			return be, be.LockKey(), nil
		},
		check: func() []string { return nil },
		close: func() {
			opened.Range(func(_, be any) bool {
				be.(*pve.Backend).CloseConsoles()
				return true
			})
		},
	}, nil
}
