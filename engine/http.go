package engine

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
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
	mux.Handle("/mcp", s.requireCredential(newSessionBinding(s.sessions.abandon, s.negotiatedRevision).wrap(withSSERetry(mcpHandler))))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		b := BuildInfo()
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": b.Version, "commit": b.Commit, "clean": b.Clean})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		problems := s.app.Problems()
		status, code := "ready", http.StatusOK
		if len(problems) > 0 {
			status, code = "not ready", http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]any{
			"status": status, "version": Version, "benches": len(s.app.BenchNames()), "bench": s.app.BenchFacts(),
			"tools": len(s.ToolNames()), "toolsets": s.Toolsets(), "eyes": s.app.EyesReport(), "problems": append([]string{}, problems...),
		})
	})
	mux.Handle("/metrics", s.metrics.handler())
	return s.hostGuard(mux)
}

// hostGuard answers 421 to a Host header that is neither loopback nor on
// the allowlist (the app's rule, shared with the browser views).
func (s *Server) hostGuard(next http.Handler) http.Handler {
	return app.HostGuard(s.cfg.Server.AllowedHosts, next)
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

// sseRetryAfter is the reconnection delay every SSE stream announces (its
// retry field, sseRetry in ms). The SDK writes one only when it closes a
// stream itself, so withSSERetry puts it in the first event block of each
// stream.
const sseRetryAfter = time.Second

var sseRetry = strconv.FormatInt(sseRetryAfter.Milliseconds(), 10)

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

// pollRevision is the protocol revision whose streams poll (SEP-1699): the
// SDK primes each POST stream with an event id and lets a handler close a
// stream mid-call; the client comes back with Last-Event-ID for the rest.
// Older revisions define neither; 2026-07-28 drops both.
const pollRevision = "2025-11-25"

// ssePoll is how long a call's stream stays open before the server closes
// it for the client to come back (Server.streamPoll; tests shorten it).
const ssePoll = 30 * time.Second

// negotiatedRevision answers the protocol revision session id negotiated
// at initialize, "" before that. The SDK keeps it to itself; its rule is
// the client's revision if the SDK speaks it (initialize ends at
// 2025-11-25), else the newest it negotiates.
func (s *Server) negotiatedRevision(id string) string {
	for ss := range s.mcp.Sessions() {
		if ss.ID() != id {
			continue
		}
		p := ss.InitializeParams()
		if p == nil {
			return ""
		}
		if p.ProtocolVersion <= pollRevision && slices.Contains(mcp.SupportedProtocolVersions(), p.ProtocolVersion) {
			return p.ProtocolVersion
		}
		return pollRevision
	}
	return ""
}

// pollStream closes a call's SSE stream every s.streamPoll while the call
// runs, on a 2025-11-25 stream (the header says which: sessionBinding puts
// the session's revision there), so that no call holds a connection for
// its whole length: the client reconnects with Last-Event-ID and gets what
// was sent meanwhile, the answer included. It closes only when the call has
// sent an event since the last close (the priming event counts): the Go
// SDK's client gives up on a stream that ends five times with nothing new.
// sent counts the call's events; stop ends the polling.
func (s *Server) pollStream(req *mcp.CallToolRequest) (sent, stop func()) {
	if req.Extra == nil || req.Extra.CloseSSEStream == nil || s.streamPoll <= 0 || req.Extra.Header.Get(protocolHeader) != pollRevision {
		return func() {}, func() {}
	}
	var (
		events  atomic.Int64
		mu      sync.Mutex // guards timer, stopped and seen
		timer   *time.Timer
		stopped bool
		seen    int64
	)
	events.Store(1) // the priming event
	mu.Lock()
	defer mu.Unlock()
	// A timer, not a goroutine: most calls end before it fires.
	timer = time.AfterFunc(s.streamPoll, func() {
		mu.Lock()
		n := events.Load()
		closeIt := !stopped && n != seen
		seen = n
		mu.Unlock()
		if closeIt { // after the answer, a no-op
			req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: sseRetryAfter})
		}
		mu.Lock()
		if !stopped {
			timer.Reset(s.streamPoll)
		}
		mu.Unlock()
	})
	return func() { events.Add(1) }, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}
