package engine

import (
	"encoding/json"
	"io"
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
		// A client that loses its stream mid-call (a proxy's idle cut, a
		// laptop's Wi-Fi) resumes it with Last-Event-ID and gets the rest.
		EventStore: newEventStore(),
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.requireCredential(newSessionBinding(s.sessions.abandon).wrap(withSSERetry(mcpHandler))))
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
			"tools": len(s.ToolNames()), "toolsets": s.Toolsets(), "eyes": s.EyesReport(), "problems": append([]string{}, problems...),
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

// eventStoreBytes bounds the SSE events kept for resumption, across every
// session of the process: a few full-size screenshots' worth. Past it the
// oldest events of every stream go first, and resuming from one of them
// answers 400 (the call's answer is then lost; calling again is safe for
// every wait). A closed session's events are freed at once.
const eventStoreBytes = 16 << 20

func newEventStore() *mcp.MemoryEventStore {
	st := mcp.NewMemoryEventStore(nil)
	st.SetMaxBytes(eventStoreBytes)
	return st
}

// sseRetry is the reconnection delay every SSE stream announces (its retry
// field, in ms). The SDK writes one only when it closes a stream itself, so
// withSSERetry puts it in the first event block of each stream.
const sseRetry = "1000"

func withSSERetry(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&retryWriter{ResponseWriter: w}, r)
	})
}

type retryWriter struct {
	http.ResponseWriter
	started bool
}

// Write prefixes the body of an event stream with the retry field: the SDK
// writes whole event blocks, so it joins the first one.
func (w *retryWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.started = true
		if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			if _, err := io.WriteString(w.ResponseWriter, "retry: "+sseRetry+"\n"); err != nil {
				return 0, err
			}
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *retryWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *retryWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
