package engine

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
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

// callerFromHeader reads the credentials of an HTTP request (the app's
// rule, shared with the browser views).
func callerFromHeader(cfg *config.Config, h http.Header) (caller, error) {
	w, err := app.WhoFromHeader(cfg, h)
	return caller{creds: w.Creds, id: w.ID}, err
}
