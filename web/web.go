// Package web is poligon's browser door: pages under /ui/ that show a
// caller's VMs, stands and benches, one VM's live console and its trace so
// far. It serves the app (internal/app) as the MCP door does, with the
// same credentials and rules: a VM is seen only by its owner (a physical
// bench by its lease holder), and input from the browser goes through
// hostapi's LockVM and input verbs, so the bench's gates apply and each
// input is a trace step and an audit record like any other call.
//
// The pages are server-rendered HTML with a little JavaScript, every asset
// embedded; the console follows the frames poligon already receives (no
// second VNC connection), sending a browser only the part that changed.
package web

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poligon/poligon/internal/app"
)

// Options are what a door decides beyond the app.
type Options struct {
	// LoginToken, when set, is a one-time token that logs in as the app's
	// local owner (poligon ui: a stdio user has no bearer token); it is
	// spent by its first use.
	LoginToken string
	// SessionTTL is how long a login lasts; 0: 12 hours.
	SessionTTL time.Duration
	// PollEvery is how often a console feed looks at the console's change
	// clock; 0: 20 ms.
	PollEvery time.Duration
	// FrameGap is the least time between two frames a console feed sends
	// (a change after a quiet moment goes at once); 0: 66 ms, 15 frames a
	// second.
	FrameGap time.Duration
}

// Server is the browser door of an app.
type Server struct {
	app  *app.App
	log  *slog.Logger
	o    Options
	sess *sessions

	mu    sync.Mutex
	feeds map[string]*feed // console feeds by bench, vmid and owner

	loginToken atomic.Pointer[string] // spent on first use
	reqN       atomic.Int64
	reqPrefix  string
}

// New makes the browser door of an app. It does not listen: Handler
// answers /ui/ for a listener the caller owns.
func New(a *app.App, o Options) *Server {
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 20 * time.Millisecond
	}
	if o.FrameGap <= 0 {
		o.FrameGap = 66 * time.Millisecond
	}
	s := &Server{app: a, log: a.Log, o: o, sess: newSessions(o.SessionTTL), feeds: map[string]*feed{},
		reqPrefix: fmt.Sprintf("%06x-w", uint32(time.Now().Unix())&0xffffff)}
	if o.LoginToken != "" {
		t := o.LoginToken
		s.loginToken.Store(&t)
	}
	return s
}

//go:embed assets
var assetsFS embed.FS

var (
	static, _ = fs.Sub(assetsFS, "assets/static")
	pages     = template.Must(template.New("").Funcs(template.FuncMap{
		"clock":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"seconds": func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) },
	}).ParseFS(assetsFS, "assets/*.html"))
)

// contentSecurity is every page's policy: scripts, styles, images and
// connections from this origin only (frames are blob: and data: images the
// page makes), no inline script or style, never inside a frame.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Handler answers /ui/ behind the Host guard /mcp has.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/login", s.loginPage)
	mux.HandleFunc("POST /ui/login", s.login)
	mux.HandleFunc("POST /ui/logout", s.authed(s.logout))
	mux.HandleFunc("GET /ui/{$}", s.authed(s.vmsPage))
	mux.HandleFunc("GET /ui/api/vms", s.authed(s.vmsJSON))
	mux.HandleFunc("GET /ui/stands", s.authed(s.standsPage))
	mux.HandleFunc("GET /ui/stands/{bench}/{name}", s.authed(s.standPage))
	mux.HandleFunc("GET /ui/api/stands/{bench}/{name}", s.authed(s.standJSON))
	mux.HandleFunc("GET /ui/benches", s.authed(s.benchesPage))
	mux.HandleFunc("GET /ui/vm/{bench}/{vmid}", s.authed(s.vmPage))
	mux.HandleFunc("GET /ui/vm/{bench}/{vmid}/console", s.authed(s.console))
	mux.HandleFunc("GET /ui/vm/{bench}/{vmid}/trace", s.authed(s.traceJSON))
	mux.HandleFunc("GET /ui/vm/{bench}/{vmid}/frame/{digest}", s.authed(s.frame))
	mux.HandleFunc("POST /ui/vm/{bench}/{vmid}/input", s.authed(s.input))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) { s.notFound(w, r) })
	return app.HostGuard(s.app.Config.Server.AllowedHosts, secure(mux))
}

// secure sets every answer's security headers.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurity)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// render writes a page; its data always carries the session's CSRF token
// and owner for the layout.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, page string, sess *session, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	if sess != nil {
		data["CSRF"] = sess.csrf
		data["Who"] = sess.who.ID
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, page, data); err != nil {
		s.log.Warn("web page not rendered", "page", page, "err", err)
	}
}

// notFound answers 404 with nothing about what was asked: another owner's
// VM looks the same as none.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusNotFound, "notfound.html", s.sess.get(r), nil)
}

// nextReq is a browser call's correlation id (apart from the MCP door's).
func (s *Server) nextReq() string { return fmt.Sprintf("%s%d", s.reqPrefix, s.reqN.Add(1)) }
