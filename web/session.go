package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
)

// Browser sessions: the credentials /mcp takes (a bearer token the config
// maps to an owner, a Proxmox token) are given once on the login form and
// kept on the server; the browser holds only a random session id in an
// HttpOnly, SameSite=Strict cookie. Every state-changing request carries
// the session's CSRF token as well.

// cookieName is the session cookie's.
const cookieName = "poligon_ui"

// session is one browser's: before login it holds only the CSRF token its
// login form carries.
type session struct {
	id       string
	csrf     string
	who      app.Who // the credentials it logged in with (secrets stay here)
	loggedIn bool
	expires  time.Time
}

type sessions struct {
	ttl      time.Duration
	maxForms int // maxLoginForms, or a test's
	mu       sync.Mutex
	m        map[string]*session
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, maxForms: maxLoginForms, m: map[string]*session{}}
}

// randomID is 32 random bytes, URL-safe.
func randomID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// NewLoginToken makes a one-time login token (poligon ui prints it).
func NewLoginToken() string { return randomID() }

// get answers the request's live session, nil for none.
func (ss *sessions) get(r *http.Request) *session {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[c.Value]
	if !ok {
		return nil
	}
	if time.Now().After(s.expires) {
		delete(ss.m, c.Value)
		return nil
	}
	return s
}

// A session before login (anyone who opens the login form has one) lives
// loginTTL, and at most maxLoginForms of them are kept: opening the form
// again and again must not grow the server's memory.
const (
	loginTTL      = 15 * time.Minute
	maxLoginForms = 10000
)

// start makes a new session (logged in with who, when set) and sets its
// cookie; old, if any, ends: a login never keeps the id it came with.
func (ss *sessions) start(w http.ResponseWriter, r *http.Request, old *session, who *app.Who) *session {
	now := time.Now()
	s := &session{id: randomID(), csrf: randomID(), expires: now.Add(loginTTL)}
	if who != nil {
		s.who, s.loggedIn, s.expires = *who, true, now.Add(ss.ttl)
	}
	ss.mu.Lock()
	if old != nil {
		delete(ss.m, old.id)
	}
	forms := 0
	for id, o := range ss.m { // the expired go as new ones come
		if now.After(o.expires) {
			delete(ss.m, id)
		} else if !o.loggedIn {
			forms++
		}
	}
	for id, o := range ss.m { // past the bound, any login form may go (it is opened again)
		if forms < ss.maxForms {
			break
		}
		if !o.loggedIn {
			delete(ss.m, id)
			forms--
		}
	}
	ss.m[s.id] = s
	ss.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.id, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, Expires: s.expires})
	return s
}

// end forgets a session and clears its cookie.
func (ss *sessions) end(w http.ResponseWriter, s *session) {
	ss.mu.Lock()
	delete(ss.m, s.id)
	ss.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

// csrfOK reports whether r carries s's CSRF token (the X-CSRF-Token header
// of a script's request, or a form's csrf field).
func csrfOK(r *http.Request, s *session) bool {
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return s != nil && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1
}

// authed serves a logged-in session only: a page sends the browser to the
// login form, anything else answers 401. A POST without the session's
// CSRF token is refused before it does anything.
func (s *Server) authed(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := s.sess.get(r)
		if sess == nil || !sess.loggedIn {
			if r.Method == http.MethodGet && r.Header.Get("Upgrade") == "" && !strings.Contains(r.URL.Path, "/api/") &&
				!strings.HasSuffix(r.URL.Path, "/trace") && !strings.Contains(r.URL.Path, "/frame/") {
				http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
				return
			}
			http.Error(w, "error: not logged in\nhint: log in at /ui/login", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && !csrfOK(r, sess) {
			http.Error(w, "error: the request carries no valid CSRF token\nhint: reload the page and try again", http.StatusForbidden)
			return
		}
		next(w, r, sess)
	}
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	sess := s.sess.get(r)
	if sess != nil && sess.loggedIn {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	if sess == nil {
		sess = s.sess.start(w, r, nil, nil)
	}
	s.render(w, r, http.StatusOK, "login.html", nil, map[string]any{"LoginCSRF": sess.csrf, "OneTime": s.loginToken.Load() != nil})
}

// login exchanges a credential for a logged-in session. The form's fields
// become the headers /mcp reads, so both doors take the same credentials
// by the same rule; the credential is then tried on the default bench, so
// a token the bench refuses does not log in.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	sess := s.sess.get(r)
	if !csrfOK(r, sess) {
		http.Error(w, "error: the login form carries no valid CSRF token\nhint: open /ui/login again", http.StatusForbidden)
		return
	}
	fail := func(msg, hint string) {
		s.log.Info("web login refused", "error", msg)
		s.render(w, r, http.StatusUnauthorized, "login.html", nil, map[string]any{"LoginCSRF": sess.csrf, "OneTime": s.loginToken.Load() != nil,
			"Error": msg, "Hint": hint})
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if once := s.loginToken.Load(); once != nil && token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(*once)) == 1 &&
		s.loginToken.CompareAndSwap(once, nil) {
		local := s.app.Local()
		who := app.Who{Creds: local, ID: local.Owner}
		s.sess.start(w, r, sess, &who)
		s.log.Info("web login", "caller", who.ID, "with", "one-time token")
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if pve := strings.TrimSpace(r.PostFormValue("pve_token")); pve != "" {
		h.Set("X-PVE-Token", pve)
	}
	who, err := app.WhoFromHeader(s.app.Config, h)
	if err != nil {
		fail(err.Error(), hostapi.HintOf(err))
		return
	}
	if _, err := s.app.Caller(r.Context(), who.Creds, ""); err != nil {
		fail("the default bench refused the credential: "+err.Error(), hostapi.HintOf(err))
		return
	}
	s.sess.start(w, r, sess, &who)
	s.log.Info("web login", "caller", who.ID)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, sess *session) {
	s.sess.end(w, sess)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// alive reports whether the session id is still logged in.
func (ss *sessions) alive(id string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[id]
	return ok && s.loggedIn && time.Now().Before(s.expires)
}
