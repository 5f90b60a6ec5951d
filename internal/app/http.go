package app

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"

	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/redact"
)

// The rules every HTTP door shares (the MCP endpoint, the browser views):
// which Host values are served, and how a request's credentials are read.

// Who is a caller of an HTTP door: the credentials they brought, and how
// the audit log names them.
type Who struct {
	// Creds.Owner is a verified owner name: from a bearer token the config
	// knows (or the config itself, at a trusted door). Empty for a caller
	// with only a Proxmox token: PVE benches derive the owner from it, other
	// benches refuse such a caller. Creds.Token is the Proxmox API token.
	Creds hostapi.Credentials
	ID    string // for the audit log: never a secret
}

// WhoFromHeader reads the credentials of an HTTP request: a bearer token
// the config maps to an owner (local benches), a Proxmox token in
// X-PVE-Token (PVE benches derive the owner from it), a physical bench's
// key in X-Bench-Key.
func WhoFromHeader(cfg *config.Config, h http.Header) (Who, error) {
	c := Who{Creds: hostapi.Credentials{Remote: true}}
	if pve := strings.TrimSpace(h.Get("X-PVE-Token")); pve != "" {
		c.Creds.Token = redact.Secret(pve)
		c.ID = "(a malformed PVE token)"
		if id, _, ok := strings.Cut(pve, "="); ok {
			c.ID = id // user@realm!tokenid: the secret cut off
		}
	}
	if auth := h.Get("Authorization"); auth != "" {
		token, ok := strings.CutPrefix(auth, "Bearer ")
		owner, known := cfg.OwnerOfToken(strings.TrimSpace(token))
		if !ok || !known {
			return c, hostapi.Failf("send Authorization: Bearer <token> with a token from the server's config", "the bearer token is not valid")
		}
		c.Creds.Owner, c.ID = owner, owner
	}
	if key := strings.TrimSpace(h.Get("X-Bench-Key")); key != "" {
		c.Creds.BenchKey = redact.Secret(key)
		if c.ID == "" {
			c.ID = "(a bench key)"
		}
	}
	if c.Creds.Owner == "" && c.Creds.Token == "" && c.Creds.BenchKey == "" {
		return c, hostapi.Failf("send Authorization: Bearer <token> (local benches), X-PVE-Token: user@realm!tokenid=secret (Proxmox benches) or X-Bench-Key (a physical bench)",
			"no credential: calls over HTTP must carry one")
	}
	return c, nil
}

// HostGuard answers 421 to a Host header that is neither loopback nor on
// the allowlist (the config's server.allowed_hosts; "*" is any): a
// DNS-rebinding page in a browser cannot reach the door behind it.
func HostGuard(allowedHosts []string, next http.Handler) http.Handler {
	allowed := map[string]bool{}
	anyHost := false
	for _, h := range allowedHosts {
		if h == "*" {
			anyHost = true
		}
		allowed[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		name := host
		if h, _, err := net.SplitHostPort(host); err == nil {
			name = h
		}
		name = strings.Trim(name, "[]")
		ip := net.ParseIP(name)
		ok := anyHost || allowed[host] || allowed[name] || name == "localhost" || ip != nil && ip.IsLoopback()
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMisdirectedRequest)
			json.NewEncoder(w).Encode(map[string]any{
				"error": "host not allowed",
				"hint":  "the operator adds it with --allowed-host or POLIGON_MCP_ALLOWED_HOSTS",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}
