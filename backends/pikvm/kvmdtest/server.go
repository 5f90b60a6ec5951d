// Package kvmdtest is a fake PiKVM: kvmd's HTTPS API (the /api routes nginx
// forwards) in front of a real QEMU machine driven over QMP, so a client's
// effects are real: a snapshot is the VM's screen, typed keys reach the
// guest's console, ATX power stops and starts the VM, and the mass-storage
// drive appears in the guest as /dev/sr0 (CD) or /dev/sda (flash).
//
// It models kvmd v4.197 as read from its source (benches.md §1): the
// envelope {"ok","result"} with sorted keys; error classes and codes
// (401 UnauthorizedError when no credentials came, 403 ForbiddenError when
// they were wrong, 400 ValidatorError / MsdConnectedError / ..., 409
// AtxIsBusyError / MsdIsBusyError, 503 UnavailableError); TOTP appended to
// the password; the streamer that runs only while a /api/ws client with
// stream=1 is connected (starting with a delay, stopping 10 s after the last
// client); snapshots with uStreamer's headers and allow_offline; HID events
// sent to the machine without pacing, so fast input is lost the way real
// targets lose it (QEMU's usb-kbd queues 16 key codes and the guest polls it
// every 10 ms); hid/print's limit (1024) and its silent drop of characters
// the keymap lacks; ATX clicks (0.1 s, a 5.5 s long press, 1 s settle) that
// hold a busy region; the MSD's rule that nothing changes while connected.
//
// The machine (VM) is the fake's own QEMU process, not a local-backend VM:
// it needs a CD drive, a USB keyboard and tablet, and a power-off that keeps
// QEMU alive for the power button (see vm.go).
package kvmdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Options configure the fake. Zero durations take kvmd's defaults.
type Options struct {
	VM *VM // the machine behind the PiKVM (required)

	User     string // default "admin"
	Password string // default "admin"
	// TOTPSecret (base32) turns on 2FA: the last 6 characters of every
	// password must be the current code (kvmd's valid_window=1).
	TOTPSecret string

	StreamerStart time.Duration // from the first stream client to the first snapshot; default 500 ms
	StreamerStop  time.Duration // kvmd's shutdown_delay after the last client; default 10 s
	FramePeriod   time.Duration // the streamer's capture period; default 1/30 s
	Quality       int           // JPEG quality; default 80 (uStreamer's)

	ClickDelay     time.Duration // ATX click; default 100 ms
	LongClickDelay time.Duration // ATX long press; default 5.5 s
	ClickSettle    time.Duration // busy after a click; default 1 s

	Heartbeat time.Duration // websocket ping period; default 15 s (a pong is due within half of it)

	// Version is the kvmd version the fake reports (default "4.197").
	// Older versions ignore hid/print's parameters as those did:
	// delay before 4.93, slow before 4.25 (aiohttp ignores unknown ones).
	Version string

	Logger *slog.Logger
}

// Server is the fake kvmd. Its methods are safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger
	vm   *VM
	dir  string // MSD storage and screendumps

	ln       net.Listener
	srv      *http.Server
	certPEM  []byte
	certFile string
	fp       string

	mu     sync.Mutex
	calls  []string
	tokens map[string]bool

	hid      *hid
	streamer *streamer
	atx      *atx
	msd      *msd
}

// New starts the fake on 127.0.0.1 with a fresh self-signed certificate.
func New(opts Options) (*Server, error) {
	if opts.VM == nil {
		return nil, errors.New("kvmdtest: Options.VM is required")
	}
	if opts.User == "" && opts.Password == "" {
		opts.User, opts.Password = "admin", "admin"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&opts.StreamerStart, 500*time.Millisecond)
	def(&opts.StreamerStop, 10*time.Second)
	def(&opts.FramePeriod, time.Second/30)
	def(&opts.ClickDelay, 100*time.Millisecond)
	def(&opts.LongClickDelay, 5500*time.Millisecond)
	def(&opts.ClickSettle, time.Second)
	def(&opts.Heartbeat, 15*time.Second)
	if opts.Quality == 0 {
		opts.Quality = 80
	}
	if opts.Version == "" {
		opts.Version = "4.197"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir, err := os.MkdirTemp("", "kvmdtest")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: log, vm: opts.VM, dir: dir, tokens: map[string]bool{}}
	if err := os.Mkdir(s.imagesDir(), 0o755); err != nil {
		return nil, err
	}
	cert, err := s.makeCert()
	if err != nil {
		return nil, err
	}
	s.hid = newHID(s)
	s.streamer = newStreamer(s)
	s.atx = &atx{s: s}
	s.msd = newMSD(s)

	s.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.srv = &http.Server{
		Handler:   s.routes(),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go s.srv.ServeTLS(s.ln, "", "")
	return s, nil
}

// URL is the fake's base URL (https://127.0.0.1:port, no /api).
func (s *Server) URL() string { return "https://" + s.ln.Addr().String() }

// CAFile is a PEM file holding the fake's self-signed certificate.
func (s *Server) CAFile() string { return s.certFile }

// CertPEM is the fake's certificate.
func (s *Server) CertPEM() []byte { return s.certPEM }

// Fingerprint is the SHA-256 of the certificate (DER), lower-case hex.
func (s *Server) Fingerprint() string { return s.fp }

// VM is the machine behind the fake.
func (s *Server) VM() *VM { return s.vm }

// SetSignal plugs (true) or unplugs (false) the HDMI cable: without a
// signal the streamer reports offline. A machine that is off has no signal
// either.
func (s *Server) SetSignal(on bool) { s.streamer.setSignal(on) }

// StreamClients counts the websocket clients that asked for the stream.
func (s *Server) StreamClients() int { return s.streamer.clientCount() }

// WaitHID blocks until every HID event queued so far has gone to the
// machine (QEMU may still hold some in its keyboard's queue).
func (s *Server) WaitHID() { s.hid.pending.Wait() }

// Calls lists the requests served so far: "POST /api/hid/print?delay=0.01",
// in order (the query as sent; kvmd takes credentials only in headers).
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// Close stops the server (open websockets included) and removes the MSD
// storage; the VM is left to its owner.
func (s *Server) Close() error {
	s.streamer.close()
	err := s.srv.Close()
	s.hid.close()
	s.atx.wait()
	s.msd.close()
	os.RemoveAll(s.dir)
	return err
}

func (s *Server) imagesDir() string { return filepath.Join(s.dir, "images") }

// makeCert makes the self-signed certificate a PiKVM ships with (kvmd
// generates one at first boot), for 127.0.0.1 and localhost.
func (s *Server) makeCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"kvmdtest"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // self-signed: its own authority, so a CA file can hold it
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	sum := sha256.Sum256(der)
	s.fp = hex.EncodeToString(sum[:])
	s.certPEM = pemEncode(der)
	s.certFile = filepath.Join(s.dir, "kvmd.crt")
	if err := os.WriteFile(s.certFile, s.certPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func pemEncode(der []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString(der)
	var sb strings.Builder
	sb.WriteString("-----BEGIN CERTIFICATE-----\n")
	for len(b64) > 64 {
		sb.WriteString(b64[:64] + "\n")
		b64 = b64[64:]
	}
	sb.WriteString(b64 + "\n-----END CERTIFICATE-----\n")
	return []byte(sb.String())
}

// --- envelope and errors (kvmd/htserver.py) --------------------------------------------------------------

// kvmdError is an exception as kvmd answers it: its class name, message and
// the status htserver maps its base class to.
type kvmdError struct {
	status int
	class  string
	msg    string
}

func (e *kvmdError) Error() string { return e.class + ": " + e.msg }

func fail(status int, class, format string, args ...any) error {
	return &kvmdError{status: status, class: class, msg: fmt.Sprintf(format, args...)}
}

var (
	errUnauthorized = fail(401, "UnauthorizedError", "Unauthorized")
	errForbidden    = fail(403, "ForbiddenError", "Forbidden")
	errUnavailable  = fail(503, "UnavailableError", "Service Unavailable")
)

// validatorError is kvmd's raise_error: the argument as Python's repr shows
// a string, unless hidden.
func validatorError(arg any, name string) error {
	switch a := arg.(type) {
	case nil:
		return fail(400, "ValidatorError", "None argument is not a valid %s", name)
	case string:
		return fail(400, "ValidatorError", "The argument %s is not a valid %s", pyRepr(a), name)
	}
	return fail(400, "ValidatorError", "The argument '%v' is not a valid %s", arg, name)
}

func pyRepr(s string) string {
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}

// writeJSON answers kvmd's envelope. encoding/json sorts map keys, as
// kvmd's sort_keys does; kvmd also indents by 4.
func writeJSON(w http.ResponseWriter, status int, result any) {
	if result == nil {
		result = map[string]any{}
	}
	body, _ := json.MarshalIndent(map[string]any{"ok": status == 200, "result": result}, "", "    ")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(body)
}

func writeError(w http.ResponseWriter, err error) {
	var ke *kvmdError
	if !errors.As(err, &ke) {
		ke = &kvmdError{status: 500, class: "Exception", msg: err.Error()}
	}
	writeJSON(w, ke.status, map[string]any{"error": ke.class, "error_msg": ke.msg})
}

// --- routing and auth (kvmd/apps/kvmd/api/auth.py) -------------------------------------------------------

// handler serves one route: a result for the envelope, or an error; a
// handler that wrote its own answer (a JPEG, a stream) returns raw.
type handler func(w http.ResponseWriter, r *http.Request) (any, error)

// raw marks an answer the handler wrote itself.
var raw = &struct{}{}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, auth bool, h handler) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			call := r.Method + " " + r.URL.Path
			if r.URL.RawQuery != "" {
				call += "?" + r.URL.RawQuery
			}
			s.calls = append(s.calls, call)
			s.mu.Unlock()
			if auth {
				if err := s.checkAuth(r); err != nil {
					writeError(w, err)
					return
				}
			}
			result, err := h(w, r)
			switch {
			case err != nil:
				writeError(w, err)
			case result != raw:
				writeJSON(w, 200, result)
			}
		})
	}
	route("POST /api/auth/login", false, s.login)
	route("POST /api/auth/logout", true, s.logout)
	route("GET /api/auth/check", true, func(http.ResponseWriter, *http.Request) (any, error) { return nil, nil })
	route("GET /api/info", true, s.info)

	route("GET /api/ws", true, s.streamer.serveWS)
	route("GET /api/streamer", true, s.streamer.state)
	route("GET /api/streamer/snapshot", true, s.streamer.snapshot)

	route("GET /api/hid", true, s.hid.state)
	route("POST /api/hid/print", true, s.hid.print)
	route("POST /api/hid/events/send_key", true, s.hid.sendKey)
	route("POST /api/hid/events/send_shortcut", true, s.hid.sendShortcut)
	route("POST /api/hid/events/send_mouse_move", true, s.hid.sendMouseMove)
	route("POST /api/hid/events/send_mouse_button", true, s.hid.sendMouseButton)
	route("POST /api/hid/events/send_mouse_wheel", true, s.hid.sendMouseWheel)
	route("POST /api/hid/events/send_mouse_relative", true, s.hid.sendMouseRelative)

	route("GET /api/atx", true, s.atx.state)
	route("POST /api/atx/power", true, s.atx.power)
	route("POST /api/atx/click", true, s.atx.click)

	route("GET /api/msd", true, s.msd.state)
	route("POST /api/msd/set_params", true, s.msd.setParams)
	route("POST /api/msd/set_connected", true, s.msd.setConnected)
	route("POST /api/msd/write", true, s.msd.write)
	route("POST /api/msd/write_remote", true, s.msd.writeRemote)
	route("POST /api/msd/remove", true, s.msd.remove)
	return mux
}

var (
	validUser   = regexp.MustCompile(`^[a-z_]([a-z0-9@._-]*[a-z0-9_-])?$`)
	validPasswd = regexp.MustCompile(`^[\x20-\x7e]*$`)
	validToken  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// checkAuth is check_request_auth: the first mechanism present decides; a
// wrong one is 403, none at all is 401.
func (s *Server) checkAuth(r *http.Request) error {
	if user := r.Header.Get("X-KVMD-User"); user != "" {
		return s.authorize(user, r.Header.Get("X-KVMD-Passwd"))
	}
	if c, err := r.Cookie("auth_token"); err == nil && c.Value != "" {
		if !validToken.MatchString(c.Value) {
			return fail(400, "ValidatorError", "The argument is not a valid auth token")
		}
		s.mu.Lock()
		ok := s.tokens[c.Value]
		s.mu.Unlock()
		if !ok {
			return errForbidden
		}
		return nil
	}
	if h := r.Header.Get("Authorization"); len(h) > 6 && strings.EqualFold(h[:6], "basic ") {
		dec, err := base64.StdEncoding.DecodeString(h[6:])
		user, pass, ok := strings.Cut(string(dec), ":")
		if err != nil || !ok || strings.Contains(pass, ":") {
			return errUnauthorized
		}
		return s.authorize(user, pass)
	}
	return errUnauthorized
}

// authorize is AuthManager.authorize (with the htpasswd service): the TOTP
// code first, when 2FA is on, then the password.
func (s *Server) authorize(user, passwd string) error {
	if !validUser.MatchString(user) {
		return validatorError(user, "username characters")
	}
	if !validPasswd.MatchString(passwd) {
		return fail(400, "ValidatorError", "The argument is not a valid passwd characters")
	}
	if s.opts.TOTPSecret != "" {
		if len(passwd) < 6 || !totpVerify(s.opts.TOTPSecret, passwd[len(passwd)-6:], time.Now()) {
			s.log.Info("kvmdtest: access denied by TOTP", "user", user)
			return errForbidden
		}
		passwd = passwd[:len(passwd)-6]
	}
	if user != s.opts.User || passwd != s.opts.Password {
		s.log.Info("kvmdtest: access denied", "user", user)
		return errForbidden
	}
	return nil
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := r.ParseForm(); err != nil {
		return nil, validatorError(nil, "username characters")
	}
	if err := s.authorize(r.PostForm.Get("user"), r.PostForm.Get("passwd")); err != nil {
		return nil, err
	}
	buf := make([]byte, 32)
	rand.Read(buf)
	token := hex.EncodeToString(buf)
	s.mu.Lock()
	s.tokens[token] = true
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: "auth_token", Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return nil, nil
}

func (s *Server) logout(_ http.ResponseWriter, r *http.Request) (any, error) {
	if c, err := r.Cookie("auth_token"); err == nil {
		s.mu.Lock()
		delete(s.tokens, c.Value)
		s.mu.Unlock()
	}
	return nil, nil
}

// atLeast reports whether the fake's kvmd version is major.minor or newer.
func (s *Server) atLeast(major, minor int) bool {
	var ma, mi int
	fmt.Sscanf(s.opts.Version, "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

func (s *Server) info(http.ResponseWriter, *http.Request) (any, error) {
	return map[string]any{
		"system": map[string]any{"kvmd": map[string]any{"version": s.opts.Version}, "streamer": map[string]any{"app": "ustreamer", "version": "6.x"}},
		"meta":   map[string]any{"server": map[string]any{"host": "kvmdtest"}},
		"auth":   map[string]any{"enabled": true},
	}, nil
}

// --- query validators (kvmd/validators/basic.py) ---------------------------------------------------------

// queryBool is valid_bool of a query parameter; def when absent.
func queryBool(r *http.Request, name string, def bool) (bool, error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return def, nil
	}
	v := strings.TrimSpace(q.Get(name))
	switch strings.ToLower(v) {
	case "1", "true", "yes":
		return true, nil
	case "0", "false", "no":
		return false, nil
	}
	if v == "" {
		return false, fail(400, "ValidatorError", "None argument is not a valid bool (['1', 'true', 'yes'] or ['0', 'false', 'no'])")
	}
	return false, validatorError(v, "bool (['1', 'true', 'yes'] or ['0', 'false', 'no'])")
}

// queryString is the stripped parameter, or nil when absent.
func queryString(r *http.Request, name string) *string {
	q := r.URL.Query()
	if !q.Has(name) {
		return nil
	}
	v := strings.TrimSpace(q.Get(name))
	return &v
}
