package engine

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
)

// Handler answers the HTTP endpoints: /mcp (Streamable HTTP), /healthz,
// /readyz and /metrics, all behind the Host allowlist, /mcp also behind the
// credential check, its sessions bound to the credentials that opened them.
func (s *Server) Handler() http.Handler {
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger: s.log,
		// Our own Host allowlist below guards every endpoint, whatever
		// interface we listen on; the SDK's guard only knows loopback.
		DisableLocalhostProtection: true,
		SessionTimeout:             sessionIdle,
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.requireCredential(newSessionBinding(s.sessions.abandon).wrap(mcpHandler)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		b := BuildInfo()
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": b.Version, "commit": b.Commit, "clean": b.Clean})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		problems := s.Problems()
		status, code := "ready", http.StatusOK
		if len(problems) > 0 {
			status, code = "not ready", http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]any{
			"status": status, "version": Version, "benches": len(s.benches), "bench": s.BenchFacts(),
			"tools": len(s.ToolNames()), "eyes": s.EyesReport(), "problems": append([]string{}, problems...),
		})
	})
	mux.Handle("/metrics", s.metrics.handler())
	return s.hostGuard(mux)
}

// hostGuard answers 421 to a Host header that is neither loopback nor on
// the allowlist: a DNS-rebinding page in a browser cannot reach us.
func (s *Server) hostGuard(next http.Handler) http.Handler {
	allowed := map[string]bool{}
	anyHost := false
	for _, h := range s.cfg.Server.AllowedHosts {
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
			writeJSON(w, http.StatusMisdirectedRequest, map[string]any{
				"error": "host not allowed",
				"hint":  "the operator adds it with --allowed-host or POLIGON_MCP_ALLOWED_HOSTS",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireCredential refuses an MCP request without a valid credential
// before the MCP layer sees it: no anonymous calls over HTTP, and a wrong
// credential changes nothing.
func (s *Server) requireCredential(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := callerFromHeader(s.cfg, r.Header); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="poligon"`)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": err.Error(), "hint": hostapi.HintOf(err)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
