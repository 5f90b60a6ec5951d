package engine

import (
	"context"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"
)

// sessionIdle closes an MCP session over HTTP nobody has used for this
// long: the SDK keeps sessions until then, and so do we their owners. A
// client coming back later gets 404 and opens a new session, as the
// Streamable HTTP spec has it.
const sessionIdle = 24 * time.Hour

// sessionBinding binds each MCP session over HTTP to the credentials that
// opened it. A session id is random and goes only to its client, but a
// leaked one must not let another caller read the session's stream or end
// it: requests naming a session with other credentials get 403 and change
// nothing. Only a digest of the credentials is kept.
type sessionBinding struct {
	mu     sync.Mutex
	owners map[string]boundSession
	// abandon cancels the calls in flight on a session its client ends
	// (DELETE): the SDK would wait for them before it closes the session.
	abandon func(id string)
	// revisionOf answers the protocol revision a session negotiated, ""
	// before its initialize is through.
	revisionOf func(id string) string
}

type boundSession struct {
	credentials [sha256.Size]byte
	lastUsed    time.Time
	revision    string // negotiated, once known
}

func newSessionBinding(abandon func(id string), revisionOf func(id string) string) *sessionBinding {
	return &sessionBinding{owners: map[string]boundSession{}, abandon: abandon, revisionOf: revisionOf}
}

func credentialDigest(h http.Header) [sha256.Size]byte {
	return sha256.Sum256([]byte(h.Get("Authorization") + "\x00" + h.Get("X-PVE-Token")))
}

// wrap guards next (the MCP handler), which it expects to run only for
// requests whose credentials are valid.
func (b *sessionBinding) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		digest := credentialDigest(r.Header)
		id := r.Header.Get("Mcp-Session-Id")
		if id == "" {
			// A new session: learn its id from the answer.
			next.ServeHTTP(&sessionRecorder{ResponseWriter: w, bind: func(id string) { b.bind(id, digest) }}, r)
			return
		}
		if !b.use(id, digest) {
			writeJSON(w, http.StatusForbidden, map[string]any{
				"error": "this MCP session was opened with other credentials",
				"hint":  "open your own session: initialize without an Mcp-Session-Id header",
			})
			return
		}
		if r.Method == http.MethodDelete {
			b.abandon(id)
		}
		// A request in a session speaks the session's revision when its
		// header names none or an older one: the SDK takes the header
		// (2025-03-26 without one) for what to prime and whether a stream
		// may close mid-call, where the spec relies on the version the
		// session negotiated. The conformance suite, for one, says
		// 2025-03-26 on its POSTs in a 2025-11-25 session.
		if v := b.revision(id); v != "" && r.Header.Get(protocolHeader) < v {
			r.Header.Set(protocolHeader, v)
		}
		next.ServeHTTP(w, r)
		if r.Method == http.MethodDelete {
			b.forget(id)
		}
	})
}

func (b *sessionBinding) bind(id string, digest [sha256.Size]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for old, s := range b.owners {
		if now.Sub(s.lastUsed) > sessionIdle {
			delete(b.owners, old)
		}
	}
	b.owners[id] = boundSession{credentials: digest, lastUsed: now}
}

// use reports whether the session id may be used with these credentials:
// yes for its owner, and for an id we never bound (the SDK answers 404).
func (b *sessionBinding) use(id string, digest [sha256.Size]byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.owners[id]
	if !ok {
		return true
	}
	if s.credentials != digest {
		return false
	}
	s.lastUsed = time.Now()
	b.owners[id] = s
	return true
}

// protocolHeader names a request's protocol revision (Streamable HTTP,
// 2025-06-18 and later).
const protocolHeader = "Mcp-Protocol-Version"

// revision answers the revision session id negotiated, asking the SDK
// until it knows ("" for a session it does not know or that is not
// initialised yet).
func (b *sessionBinding) revision(id string) string {
	b.mu.Lock()
	s, ok := b.owners[id]
	b.mu.Unlock()
	if !ok || s.revision != "" || b.revisionOf == nil {
		return s.revision
	}
	v := b.revisionOf(id)
	if v != "" {
		b.mu.Lock()
		if s, ok := b.owners[id]; ok {
			s.revision = v
			b.owners[id] = s
		}
		b.mu.Unlock()
	}
	return v
}

func (b *sessionBinding) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.owners, id)
}

// sessionRecorder sees the session id the SDK assigns as the answer's
// headers go out.
type sessionRecorder struct {
	http.ResponseWriter
	bind  func(id string)
	bound bool
}

func (s *sessionRecorder) WriteHeader(code int) {
	if !s.bound {
		s.bound = true
		if id := s.Header().Get("Mcp-Session-Id"); id != "" && code < 300 {
			s.bind(id)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sessionRecorder) Write(p []byte) (int, error) {
	if !s.bound {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController flush the SSE stream through us.
func (s *sessionRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// sessionCalls are the tool calls in flight, by MCP session, so that a
// session its client ends abandons them (no one will read their answers;
// a VM lock held by one is freed). A client that only loses its stream
// keeps its calls: it may come back for the answer.
type sessionCalls struct {
	mu    sync.Mutex
	next  int
	calls map[string]map[int]context.CancelFunc
}

// track makes ctx end when session id is abandoned; done forgets it.
func (sc *sessionCalls) track(ctx context.Context, id string) (context.Context, func()) {
	if id == "" {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	sc.mu.Lock()
	if sc.calls == nil {
		sc.calls = map[string]map[int]context.CancelFunc{}
	}
	if sc.calls[id] == nil {
		sc.calls[id] = map[int]context.CancelFunc{}
	}
	sc.next++
	n := sc.next
	sc.calls[id][n] = cancel
	sc.mu.Unlock()
	return ctx, func() {
		sc.mu.Lock()
		delete(sc.calls[id], n)
		if len(sc.calls[id]) == 0 {
			delete(sc.calls, id)
		}
		sc.mu.Unlock()
		cancel()
	}
}

// abandon cancels every call in flight on session id.
func (sc *sessionCalls) abandon(id string) {
	sc.mu.Lock()
	calls := sc.calls[id]
	delete(sc.calls, id)
	sc.mu.Unlock()
	for _, cancel := range calls {
		cancel()
	}
}
