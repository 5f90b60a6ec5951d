// Package redfishtest is a fake Redfish BMC over HTTPS, backed by a real
// QEMU machine through QMP, in the spirit of OpenStack's sushy-tools (which
// serves Redfish over libvirt): power actions stop and start the machine,
// InsertMedia fetches the image over HTTP and puts it in the machine's CD
// drive, the boot override is honoured at the next power-on or reset.
//
// It models what real BMCs do to clients (benches.md §2, §6): a service
// root with Links.Sessions, sessions with X-Auth-Token and Location and a
// LIMIT (an iDRAC refuses the ninth with 503 RAC0218, a MegaRAC the fifth),
// Basic auth, ETags and If-Match (412 on a stale one; a MegaRAC PATCH
// without one is 428), vendor-realistic ResetType AllowableValues (no
// PowerCycle on a MegaRAC, Supermicro's fused value), Redfish error
// envelopes, optional power lag with 409 while an action is pending, and
// each dialect's virtual media rules (see Dialect).
//
// It logs one line per request (method, path, status) and never a header
// or a body, so a test can grep its log for a password.
package redfishtest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends/qmp"
)

// Options configure a fake BMC.
type Options struct {
	Dialect  Dialect
	User     string
	Password string
	// QMP is the machine's QMP socket; CD the qdev id of its CD drive.
	QMP string
	CD  string
	// SessionLimit overrides the dialect's limit of open sessions.
	SessionLimit int
	// SessionTimeout is how long an unused session lives (default 30 min,
	// the usual BMC default).
	SessionTimeout time.Duration
	// PowerLag delays the effect of On, ForceOff, PowerCycle's on half and
	// PushPowerButton after the 204, as slow BMCs do (the machine reads as
	// before until then); an action meanwhile is refused with 409.
	PowerLag time.Duration
	// PasswordChangeRequired makes every call but login answer 403
	// PasswordChangeRequired, as a MegaRAC with its factory password does.
	PasswordChangeRequired bool
	// Log receives one line per request; nil discards.
	Log io.Writer
	// Observe, when set, is called after each request was answered.
	Observe func(Request)
}

// Request is one request the fake answered.
type Request struct {
	Method  string
	Path    string
	Status  int
	Auth    string // "session", "basic" or ""
	IfMatch string
	// Body is the request body, except for logins (it holds a password).
	Body string
}

// Server is a running fake BMC.
type Server struct {
	URL         string
	CertPEM     []byte // the BMC's self-signed certificate
	CAFile      string // CertPEM in a file
	Fingerprint string // SHA-256 of the certificate (DER), lower-case hex

	opts     Options
	d        *dialect
	srv      *httptest.Server
	imageDir string
	bg       sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*session // by id
	nextID   int
	created  int
	requests []Request
	rmedia   bool // AMI remote media enabled
	boot     bootOverride
	boots    []string
	cd       mediaState
	pending  int // lagged power actions not yet applied
	closed   bool

	// powerMu makes a power state read, or a Reset, one step with respect
	// to lagged actions.
	powerMu sync.Mutex
	qmpMu   sync.Mutex
	qmpC    *qmp.Client
}

type session struct {
	id, token, user string
	lastUse         time.Time
}

type bootOverride struct{ target, enabled, mode string }

type mediaState struct {
	inserted  bool
	image     string // as the client gave it, without credentials
	imageName string
	file      string
	protocol  string
}

// Start starts a fake BMC.
func Start(opts Options) (*Server, error) {
	d := dialects[opts.Dialect]
	if d == nil {
		return nil, fmt.Errorf("redfishtest: unknown dialect %q", opts.Dialect)
	}
	if opts.CD == "" {
		opts.CD = "cdrom0"
	}
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	if opts.SessionLimit == 0 {
		opts.SessionLimit = d.sessionLimit
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	cert, certPEM, fp, err := selfSigned(d.subject, d.dnsNames, d.forLoopback)
	if err != nil {
		return nil, err
	}
	imageDir, err := os.MkdirTemp("", "redfishtest-media")
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(imageDir, "bmc-cert.pem")
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	s := &Server{
		CertPEM: certPEM, CAFile: caFile, Fingerprint: fp,
		opts: opts, d: d, imageDir: imageDir,
		sessions: map[string]*session{},
		boot:     bootOverride{target: "None", enabled: "Disabled", mode: "Legacy"},
	}
	s.srv = httptest.NewUnstartedServer(s)
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	// A client that hangs up on a pin mismatch makes net/http log a
	// handshake error; it goes to the fake's log, not stderr.
	s.srv.Config.ErrorLog = log.New(opts.Log, "redfishtest: ", 0)
	s.srv.StartTLS()
	s.URL = s.srv.URL
	return s, nil
}

// Close stops the server, waits for lagged actions and drops the QMP
// connection, so another fake can drive the same machine.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.srv.Close()
	s.bg.Wait()
	s.qmpMu.Lock()
	if s.qmpC != nil {
		s.qmpC.Close()
		s.qmpC = nil
	}
	s.qmpMu.Unlock()
	os.RemoveAll(s.imageDir)
}

// OpenSessions is the number of sessions alive now.
func (s *Server) OpenSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	return len(s.sessions)
}

// SessionsCreated is the number of logins that made a session.
func (s *Server) SessionsCreated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// Requests answers every request so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Boots answers the boot source of every power-on and reset the fake
// performed ("Cd" after a Once override to Cd, "None" without one).
func (s *Server) Boots() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.boots...)
}

// DropSessions forgets every session, as a BMC reset does.
func (s *Server) DropSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions = map[string]*session{}
}

// redfishError is a Redfish error envelope.
type redfishError struct {
	Code, Message, MessageID, Detail, Resolution string
}

func (e redfishError) body() any {
	detail := e.Detail
	if detail == "" {
		detail = e.Message
	}
	info := map[string]any{"MessageId": e.MessageID, "Message": detail, "Severity": "Warning"}
	if e.Resolution != "" {
		info["Resolution"] = e.Resolution
	}
	return map[string]any{"error": map[string]any{
		"code": e.Code, "message": e.Message, "@Message.ExtendedInfo": []any{info},
	}}
}

// baseError is a Base registry error of the dialect's registry version.
func (s *Server) baseError(id, msg string) redfishError {
	v := map[Dialect]string{Dell: "Base.1.8.", MegaRAC: "Base.1.12.", Supermicro: "Base.1.4."}[s.d.name]
	return redfishError{Code: v + id, Message: msg, MessageID: v + id}
}

// reply is a handler's answer.
type reply struct {
	status  int
	body    any
	headers map[string]string
}

func ok(body any) reply { return reply{status: http.StatusOK, body: body} }
func noContent() reply  { return reply{status: http.StatusNoContent} }
func fail(status int, e redfishError) reply {
	return reply{status: status, body: e.body()}
}

type call struct {
	r      *http.Request
	path   string
	body   []byte
	auth   string
	sess   *session
	ifTag  string
	method string
}

func (c *call) json(v any) error { return json.Unmarshal(c.body, v) }

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	path := r.URL.Path
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	c := &call{r: r, path: path, body: body, method: r.Method, ifTag: r.Header.Get("If-Match")}
	rep := s.route(c)
	w.Header().Set("OData-Version", "4.0")
	for k, v := range rep.headers {
		w.Header().Set(k, v)
	}
	var out []byte
	if rep.body != nil {
		out, _ = json.Marshal(rep.body)
		w.Header().Set("Content-Type", "application/json;odata.metadata=minimal;charset=utf-8")
	}
	w.WriteHeader(rep.status)
	w.Write(out)

	logged := string(body)
	if path == sessionsPath {
		logged = "" // a login body holds the password
	}
	req := Request{Method: r.Method, Path: path, Status: rep.status, Auth: c.auth, IfMatch: c.ifTag, Body: logged}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	fmt.Fprintf(s.opts.Log, "redfishtest %s: %s %s %d\n", s.d.name, r.Method, path, rep.status)
	if s.opts.Observe != nil {
		s.opts.Observe(req)
	}
}

const (
	sessionsPath = "/redfish/v1/SessionService/Sessions"
	accountsPath = "/redfish/v1/AccountService/Accounts"
)

func (s *Server) route(c *call) reply {
	switch {
	case c.path == "/redfish" && c.method == http.MethodGet:
		return ok(map[string]any{"v1": "/redfish/v1/"})
	case c.path == "/redfish/v1" && c.method == http.MethodGet:
		return ok(s.serviceRoot())
	case c.path == sessionsPath && c.method == http.MethodPost:
		return s.login(c)
	}
	if rep, authed := s.authenticate(c); !authed {
		return rep
	}
	if s.opts.PasswordChangeRequired && !strings.HasPrefix(c.path, accountsPath) && c.path != sessionsPath+"/"+idOf(c.sess) {
		e := s.baseError("PasswordChangeRequired", "The password provided for this account must be changed before access is granted.  PATCH the Password property for this account located at the target URI '/redfish/v1/AccountService/Accounts/1' to complete this process.")
		return fail(http.StatusForbidden, e)
	}
	d := s.d
	sys, mgr := d.systemPath(), d.managerPath()
	switch {
	case c.path == "/redfish/v1/SessionService":
		return s.get(c, func() reply {
			return ok(map[string]any{"@odata.id": c.path, "@odata.type": "#SessionService.v1_1_8.SessionService",
				"Id": "SessionService", "Name": "Session Service", "ServiceEnabled": true,
				"SessionTimeout": int(s.opts.SessionTimeout / time.Second),
				"Sessions":       map[string]string{"@odata.id": sessionsPath}})
		})
	case c.path == sessionsPath:
		return s.get(c, s.listSessions)
	case strings.HasPrefix(c.path, sessionsPath+"/"):
		return s.sessionEntry(c, strings.TrimPrefix(c.path, sessionsPath+"/"))
	case c.path == "/redfish/v1/Systems":
		return s.get(c, func() reply { return ok(collection(c.path, "ComputerSystemCollection", sys)) })
	case c.path == sys:
		return s.system(c)
	case c.path == sys+"/Actions/ComputerSystem.Reset":
		return s.post(c, s.reset)
	case c.path == "/redfish/v1/Managers":
		return s.get(c, func() reply { return ok(collection(c.path, "ManagerCollection", mgr)) })
	case c.path == mgr:
		return s.get(c, func() reply { return ok(s.manager()) })
	case c.path == mgr+enableRMediaPath && d.rmediaGate:
		return s.post(c, s.enableRMedia)
	case c.path == "/redfish/v1/Chassis":
		return s.get(c, func() reply { return ok(collection(c.path, "ChassisCollection")) })
	case c.path == d.mediaCollection():
		return s.get(c, func() reply {
			if d.rmediaGate && !s.rmediaOn() {
				return ok(collection(c.path, "VirtualMediaCollection"))
			}
			return ok(collection(c.path, "VirtualMediaCollection", d.cdPath()))
		})
	case strings.HasPrefix(c.path, d.cdPath()) && (!d.rmediaGate || s.rmediaOn()):
		switch strings.TrimPrefix(c.path, d.cdPath()) {
		case "":
			return s.get(c, func() reply { return s.withETag(s.cdSlot()) })
		case "/Actions/VirtualMedia.InsertMedia":
			return s.post(c, s.insertMedia)
		case "/Actions/VirtualMedia.EjectMedia":
			return s.post(c, s.ejectMedia)
		}
	case c.path == screenshotPath && d.screenshot:
		return s.post(c, s.screenshot)
	}
	e := s.baseError("ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", c.path))
	return fail(http.StatusNotFound, e)
}

func (s *Server) get(c *call, f func() reply) reply {
	if c.method != http.MethodGet {
		return s.notAllowed(c)
	}
	return f()
}

func (s *Server) post(c *call, f func(*call) reply) reply {
	if c.method != http.MethodPost {
		return s.notAllowed(c)
	}
	return f(c)
}

func (s *Server) notAllowed(c *call) reply {
	e := s.baseError("OperationNotAllowed", fmt.Sprintf("The %s operation is not allowed on %s.", c.method, c.path))
	return fail(http.StatusMethodNotAllowed, e)
}

func (s *Server) serviceRoot() any {
	return map[string]any{
		"@odata.id": "/redfish/v1/", "@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot",
		"Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.11.0",
		"Vendor":         s.d.manufacturer,
		"Systems":        map[string]string{"@odata.id": "/redfish/v1/Systems"},
		"Managers":       map[string]string{"@odata.id": "/redfish/v1/Managers"},
		"Chassis":        map[string]string{"@odata.id": "/redfish/v1/Chassis"},
		"SessionService": map[string]string{"@odata.id": "/redfish/v1/SessionService"},
		"Links":          map[string]any{"Sessions": map[string]string{"@odata.id": sessionsPath}},
	}
}

func collection(path, typ string, members ...string) any {
	m := make([]any, 0, len(members))
	for _, id := range members {
		m = append(m, map[string]string{"@odata.id": id})
	}
	return map[string]any{"@odata.id": path, "@odata.type": "#" + typ + "." + typ, "Name": typ,
		"Members": m, "Members@odata.count": len(m)}
}

// withETag answers a resource with an ETag of its representation, so any
// change (a power state, a boot override) makes earlier tags stale.
func (s *Server) withETag(rep reply) reply {
	if rep.status == http.StatusOK {
		rep.headers = map[string]string{"ETag": etagOf(rep.body)}
	}
	return rep
}

func etagOf(body any) string {
	raw, _ := json.Marshal(body)
	sum := sha256.Sum256(raw)
	return `W/"` + hex.EncodeToString(sum[:6]) + `"`
}

// checkIfMatch answers a refusal when the request's If-Match names another
// version of the resource current renders.
func (s *Server) checkIfMatch(c *call, current func() reply) (reply, bool) {
	if c.ifTag == "" || c.ifTag == "*" {
		return reply{}, true
	}
	cur := current()
	if cur.status != http.StatusOK || etagOf(cur.body) == c.ifTag {
		return reply{}, true
	}
	e := s.baseError("PreconditionFailed", "The ETag supplied did not match the ETag required to change this resource.")
	return fail(http.StatusPreconditionFailed, e), false
}

// --- sessions and auth ------------------------------------------------------

func (s *Server) login(c *call) reply {
	var req struct {
		UserName *string
		Password *string
	}
	if err := c.json(&req); err != nil {
		return fail(http.StatusBadRequest, s.baseError("MalformedJSON", "The request body submitted was malformed JSON and could not be parsed by the receiving service."))
	}
	if req.UserName == nil || req.Password == nil {
		return fail(http.StatusBadRequest, s.baseError("PropertyMissing", "The property UserName or Password is a required property and must be included in the request."))
	}
	if *req.UserName != s.opts.User || *req.Password != s.opts.Password {
		return fail(http.StatusUnauthorized, s.d.loginError)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	if len(s.sessions) >= s.opts.SessionLimit {
		return fail(s.d.limitStatus, s.d.limitError)
	}
	s.nextID++
	s.created++
	sess := &session{id: strconv.Itoa(s.nextID), token: randomHex(16), user: *req.UserName, lastUse: time.Now()}
	s.sessions[sess.id] = sess
	loc := sessionsPath + "/" + sess.id
	return reply{status: http.StatusCreated, body: sessionBody(sess),
		headers: map[string]string{"X-Auth-Token": sess.token, "Location": loc}}
}

func sessionBody(sess *session) any {
	return map[string]any{"@odata.id": sessionsPath + "/" + sess.id, "@odata.type": "#Session.v1_3_0.Session",
		"Id": sess.id, "Name": "User Session", "UserName": sess.user}
}

func idOf(sess *session) string {
	if sess == nil {
		return ""
	}
	return sess.id
}

// authenticate accepts a live session's X-Auth-Token or Basic credentials.
func (s *Server) authenticate(c *call) (reply, bool) {
	if tok := c.r.Header.Get("X-Auth-Token"); tok != "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.expire()
		for _, sess := range s.sessions {
			if sess.token == tok {
				sess.lastUse = time.Now()
				c.auth, c.sess = "session", sess
				return reply{}, true
			}
		}
	} else if user, pass, found := c.r.BasicAuth(); found {
		if user == s.opts.User && pass == s.opts.Password {
			c.auth = "basic"
			return reply{}, true
		}
		return fail(http.StatusUnauthorized, s.d.loginError), false
	}
	rep := fail(http.StatusUnauthorized, s.baseError("NoValidSession", "There is no valid session established with the implementation."))
	rep.headers = map[string]string{"WWW-Authenticate": `Basic realm="Redfish"`}
	return rep, false
}

// expire drops sessions unused for longer than the timeout. s.mu is held.
func (s *Server) expire() {
	for id, sess := range s.sessions {
		if time.Since(sess.lastUse) > s.opts.SessionTimeout {
			delete(s.sessions, id)
		}
	}
}

func (s *Server) listSessions() reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	paths := make([]string, len(ids))
	for i, id := range ids {
		paths[i] = sessionsPath + "/" + id
	}
	return ok(collection(sessionsPath, "SessionCollection", paths...))
}

func (s *Server) sessionEntry(c *call, id string) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[id]
	if sess == nil {
		return fail(http.StatusNotFound, s.baseError("ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", c.path)))
	}
	switch c.method {
	case http.MethodGet:
		return ok(sessionBody(sess))
	case http.MethodDelete:
		delete(s.sessions, id)
		return noContent()
	}
	return s.notAllowed(c)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
