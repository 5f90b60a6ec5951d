package engine

import (
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/redact"
)

// caller is who makes a call: the credentials they bring, and how the
// audit log names them.
type caller struct {
	// creds.Owner is a verified owner name: from the config over a trusted
	// transport, or from a bearer token the config knows. Empty for a caller
	// with only a Proxmox token: PVE benches derive the owner from it, other
	// benches refuse such a caller. creds.Token is the Proxmox API token: per
	// request over HTTP (X-PVE-Token), from the config or PVE_TOKEN over
	// stdio.
	creds hostapi.Credentials
	id    string // for the audit log: never a secret
}

// callerOf finds the caller of an MCP request. Over stdio and in memory the
// transport is trusted and the config names the owner; over HTTP every
// request carries a credential, checked here and by the HTTP middleware.
func (s *Server) callerOf(req *mcp.CallToolRequest) (caller, error) {
	if req.Extra == nil || req.Extra.Header == nil {
		local := s.app.Local()
		return caller{creds: local, id: local.Owner}, nil
	}
	return callerFromHeader(s.cfg, req.Extra.Header)
}

// callerFromHeader reads the credentials of an HTTP request: a bearer token
// the config maps to an owner (local benches), and/or a Proxmox token in
// X-PVE-Token (PVE benches derive the owner from it).
func callerFromHeader(cfg *config.Config, h http.Header) (caller, error) {
	c := caller{creds: hostapi.Credentials{Remote: true}}
	if pve := strings.TrimSpace(h.Get("X-PVE-Token")); pve != "" {
		c.creds.Token = redact.Secret(pve)
		c.id = "(a malformed PVE token)"
		if id, _, ok := strings.Cut(pve, "="); ok {
			c.id = id // user@realm!tokenid: the secret cut off
		}
	}
	if auth := h.Get("Authorization"); auth != "" {
		token, ok := strings.CutPrefix(auth, "Bearer ")
		owner, known := cfg.OwnerOfToken(strings.TrimSpace(token))
		if !ok || !known {
			return c, hostapi.Failf("send Authorization: Bearer <token> with a token from the server's config", "the bearer token is not valid")
		}
		c.creds.Owner, c.id = owner, owner
	}
	if key := strings.TrimSpace(h.Get("X-Bench-Key")); key != "" {
		c.creds.BenchKey = redact.Secret(key)
		if c.id == "" {
			c.id = "(a bench key)"
		}
	}
	if c.creds.Owner == "" && c.creds.Token == "" && c.creds.BenchKey == "" {
		return c, hostapi.Failf("send Authorization: Bearer <token> (local benches), X-PVE-Token: user@realm!tokenid=secret (Proxmox benches) or X-Bench-Key (a physical bench)",
			"no credential: calls over HTTP must carry one")
	}
	return c, nil
}
