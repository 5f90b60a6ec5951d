// Package pikvm drives a physical machine through a PiKVM: kvmd's HTTPS API
// for the screen (uStreamer snapshots), keyboard and mouse (the USB HID
// gadget), ATX power and the mass-storage drive. A PiKVM is one machine, so
// Console ignores its vmid. Facts and sources: shared/reference/benches.md §1.
//
// Auth is kvmd's X-KVMD-User/X-KVMD-Passwd headers on every request, with
// the current TOTP code appended to the password when the PiKVM has 2FA on.
// TLS is verified against a CA file (else the system store) or pinned by the
// certificate's SHA-256; it is never skipped.
package pikvm

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Config describes one PiKVM.
type Config struct {
	URL        string // https://pikvm.lan (a path prefix is kept; a trailing /api is dropped)
	User       string // kvmd user; empty sends no credentials (a kvmd with auth off)
	Password   string
	TOTPSecret string // base32; set when the PiKVM has 2FA on (/etc/kvmd/totp.secret)

	CAFile    string // PEM roots to verify the PiKVM against; else the system store
	PinSHA256 string // SHA-256 of the PiKVM's certificate (hex, colons allowed); alone, it replaces chain checks

	// HTTP, when set, is used as is (its TLS is the caller's, and CAFile
	// and PinSHA256 must be empty); the websocket borrows its transport's
	// TLS config.
	HTTP *http.Client

	// KeyDelay is the pause before each HID key event while typing and
	// between the keys of a combination; default DefaultKeyDelay.
	KeyDelay time.Duration
	// StreamIdle closes the stream websocket after this long without a
	// Screen call, so the PiKVM's streamer can stop; default 5 minutes.
	StreamIdle time.Duration

	Logger *slog.Logger
}

// DefaultKeyDelay paces key events at most one per 12 ms (about 40
// characters a second of plain text): faster, a USB keyboard polled every
// 10 ms (QEMU's, and many a BIOS's) overflows its queue and loses keys.
// Measured on the kvmdtest fake: no loss at 10 ms and above, loss at 8 ms.
const DefaultKeyDelay = 12 * time.Millisecond

// Bench is a PiKVM and the machine behind it. It serves Console, Power and
// VirtualMedia; its methods are safe for concurrent use.
type Bench struct {
	base     string // https://host[:port][/prefix], no trailing slash
	host     string
	user     string
	password string
	totp     []byte
	http     *http.Client
	tls      *tls.Config
	trust    string
	keyDelay time.Duration
	idle     time.Duration
	log      *slog.Logger
	secrets  []string // what scrub removes from texts

	mu      sync.Mutex
	screen  *screen
	version string // kvmd's, once read
}

var (
	_ backends.Backend      = (*Bench)(nil)
	_ backends.Console      = (*Bench)(nil)
	_ backends.Power        = (*Bench)(nil)
	_ backends.VirtualMedia = (*Bench)(nil)
)

// New checks the configuration; it does not connect.
func New(cfg Config) (*Bench, error) {
	base, host, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	b := &Bench{
		base: base, host: host, user: cfg.User, password: cfg.Password,
		keyDelay: cfg.KeyDelay, idle: cfg.StreamIdle, log: cfg.Logger,
	}
	if b.keyDelay <= 0 {
		b.keyDelay = DefaultKeyDelay
	}
	if b.idle <= 0 {
		b.idle = 5 * time.Minute
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if cfg.User == "" && cfg.Password != "" {
		return nil, errors.New("pikvm: a password is set but no user: kvmd needs both")
	}
	if cfg.TOTPSecret != "" {
		if b.totp, err = totpKey(cfg.TOTPSecret); err != nil {
			return nil, fmt.Errorf("pikvm: %w", err)
		}
		b.secrets = append(b.secrets, cfg.TOTPSecret)
	}
	if len(cfg.Password) >= 4 { // shorter ones would mangle every message and hide little
		b.secrets = append(b.secrets, cfg.Password)
	}
	if cfg.HTTP != nil {
		if cfg.CAFile != "" || cfg.PinSHA256 != "" {
			return nil, errors.New("pikvm: set either an HTTP client or ca_file/pin_sha256, not both")
		}
		b.http = cfg.HTTP
		b.trust = "the caller's HTTP client"
		if t, ok := cfg.HTTP.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
			b.tls = t.TLSClientConfig.Clone()
		} else {
			b.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		return b, nil
	}
	if b.tls, b.trust, err = tlsConfig(host, cfg.CAFile, cfg.PinSHA256); err != nil {
		return nil, fmt.Errorf("pikvm: %w", err)
	}
	b.http = &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     b.tls,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}}
	return b, nil
}

func parseURL(raw string) (base, host string, err error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", "", errors.New("pikvm: the URL is empty (want https://<pikvm>)")
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("pikvm: %q is not a URL (want https://<pikvm>)", redactURL(raw))
	}
	if u.User != nil {
		return "", "", fmt.Errorf("pikvm: the URL %s carries credentials: give the user and password separately", u.Redacted())
	}
	if u.Scheme != "https" {
		return "", "", fmt.Errorf("pikvm: the URL %s is not https: kvmd's API is served over TLS (the PiKVM redirects http)", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("pikvm: the URL %s has a query or fragment: give only https://host[:port][/path]", u.Redacted())
	}
	p := strings.TrimSuffix(strings.TrimRight(u.EscapedPath(), "/"), "/api")
	return "https://" + u.Host + p, u.Host, nil
}

// redactURL hides anything between :// and @ in a URL that did not parse.
func redactURL(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if j := strings.LastIndex(s, "@"); j > i {
			return s[:i+3] + "xxxxx" + s[j:]
		}
	}
	return s
}

// Kind is the backend's kind.
func (b *Bench) Kind() string { return "pikvm" }

// String names the bench for messages: "pikvm https://host".
func (b *Bench) String() string { return "pikvm " + b.base }

// Close closes the stream websocket and idle connections. The Bench may
// be used again afterwards (a Screen reopens its stream).
func (b *Bench) Close() error {
	b.mu.Lock()
	s := b.screen
	b.mu.Unlock()
	if s != nil {
		s.closeStream()
	}
	b.http.CloseIdleConnections()
	return nil
}

// printPaced reports whether kvmd paces /hid/print by its delay parameter
// (kvmd 4.93 and later). The version is read once from /api/info; when it
// cannot be read, the answer is no (typing key by key is slower but safe).
func (b *Bench) printPaced(ctx context.Context) bool {
	b.mu.Lock()
	v := b.version
	b.mu.Unlock()
	if v == "" {
		var info struct {
			System struct {
				KVMD struct {
					Version string `json:"version"`
				} `json:"kvmd"`
			} `json:"system"`
		}
		if err := b.call(ctx, "kvmd version", "GET", "/info", url.Values{"fields": {"system"}}, nil, &info); err != nil {
			b.log.Warn("pikvm: reading kvmd's version failed: typing key by key", "api", b.base, "err", err)
			return false
		}
		v = info.System.KVMD.Version
		if v == "" {
			v = "unknown"
		}
		b.mu.Lock()
		b.version = v
		b.mu.Unlock()
		b.log.Info("pikvm: kvmd version", "api", b.base, "version", v)
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 4 || major == 4 && minor >= 93
}

// scrub removes the secrets from a text, wherever it came from.
func (b *Bench) scrub(s string) string {
	for _, sec := range b.secrets {
		s = strings.ReplaceAll(s, sec, "<secret>")
	}
	return s
}

// authHeaders sets kvmd's auth headers: the password with the current TOTP
// code appended when 2FA is configured.
func (b *Bench) authHeaders(h http.Header) {
	if b.user == "" {
		return
	}
	pass := b.password
	if b.totp != nil {
		pass += totpCode(b.totp, time.Now())
	}
	h.Set("X-KVMD-User", b.user)
	h.Set("X-KVMD-Passwd", pass)
}

// --- errors ---------------------------------------------------------------------------------------------------

var (
	// ErrUnauthorized is kvmd's 401: no credentials reached it.
	ErrUnauthorized = errors.New("kvmd saw no credentials")
	// ErrForbidden is kvmd's 403: the credentials were wrong.
	ErrForbidden = errors.New("kvmd refused the credentials")
)

// APIError is an error answer of kvmd: {"ok": false, "result": {"error":
// class, "error_msg": message}} with its HTTP status, or a status without
// that envelope (nginx's own errors).
type APIError struct {
	Op      string // what was being done: "power on", "snapshot"
	Status  int
	Class   string // kvmd's exception class: "AtxIsBusyError", "MsdConnectedError", ...
	Message string
	hint    string
}

func (e *APIError) Error() string {
	what := e.Class
	if what == "" {
		what = http.StatusText(e.Status)
	}
	msg := fmt.Sprintf("pikvm: %s: kvmd answered %d %s", e.Op, e.Status, what)
	if e.Message != "" && e.Message != what {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap answers the sentinel errors the answer stands for.
func (e *APIError) Unwrap() []error {
	var out []error
	switch {
	case e.Status == 409 || strings.HasSuffix(e.Class, "IsBusyError"):
		out = append(out, backends.ErrBusy)
	case e.Status == 401:
		out = append(out, ErrUnauthorized)
	case e.Status == 403:
		out = append(out, ErrForbidden)
	case e.Class == "MsdUnknownImageError":
		out = append(out, backends.ErrNotFound)
	}
	return out
}

// Hint says what to do about the answer (backends.Hinted).
func (e *APIError) Hint() string { return e.hint }

const hintNetwork = "the PiKVM did not answer: check that it is powered and reachable from this host (ping it, open its web UI)"

// wrapErr makes a transport failure clear: a pin mismatch or an untrusted
// certificate with what was trusted, anything else scrubbed of secrets.
func (b *Bench) wrapErr(op string, err error) error {
	var pe *PinError
	if errors.As(err, &pe) {
		return &backends.Failure{Err: pe, Advice: pe.Hint(), Text: b.scrub("pikvm: " + op + ": " + pe.Error())}
	}
	if cp, leaf := certProblem(err); cp != nil {
		text := fmt.Sprintf("pikvm: %s: the TLS certificate of %s is not trusted (checked against %s): %v", op, b.host, b.trust, cp)
		hint := "the operator sets the bench's ca_file to the CA that signed the PiKVM's certificate, or pins it (pin_sha256)"
		if leaf != nil {
			text += fmt.Sprintf("; it presented SHA-256 %s", fingerprintStart(sha256Sum(leaf.Raw)))
			hint += ": compare the fingerprint with the one the device shows (openssl x509 -noout -fingerprint -sha256 -in /etc/kvmd/nginx/ssl/server.crt)"
		}
		return &backends.Failure{Err: err, Advice: hint, Text: b.scrub(text)}
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return err
	}
	hint := hintNetwork
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		hint = ""
	}
	return &backends.Failure{Err: err, Advice: hint, Text: b.scrub(fmt.Sprintf("pikvm: %s: %v", op, err))}
}

// apiError reads kvmd's error answer and says what to do about it.
func (b *Bench) apiError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Op: op, Status: resp.StatusCode}
	var env struct {
		Result struct {
			Error    string `json:"error"`
			ErrorMsg string `json:"error_msg"`
		} `json:"result"`
	}
	if json.Unmarshal(body, &env) == nil && env.Result.Error != "" {
		e.Class, e.Message = env.Result.Error, b.scrub(env.Result.ErrorMsg)
	} else if text := strings.TrimSpace(string(body)); text != "" && !strings.HasPrefix(text, "<") {
		e.Message = b.scrub(firstLine(text, 200))
	}
	e.hint = b.hintFor(e)
	return e
}

func firstLine(s string, max int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

func (b *Bench) hintFor(e *APIError) string {
	switch {
	case e.Status == 401 && b.user == "":
		return "the bench has no kvmd user and password configured: the operator sets them (kvmd checks X-KVMD-User/X-KVMD-Passwd)"
	case e.Status == 401:
		return "kvmd saw no credentials although they were sent as X-KVMD-User/X-KVMD-Passwd: a proxy in front of the PiKVM may strip those headers"
	case e.Status == 403 && b.totp != nil:
		return fmt.Sprintf("kvmd refused user %q: check the bench's password and TOTP secret (the 6-digit code is appended to the password; this host's clock must be within 30 s of the PiKVM's)", b.user)
	case e.Status == 403:
		return fmt.Sprintf("kvmd refused user %q: check the bench's password; if the PiKVM has 2FA on (kvmd-totp), the operator sets the bench's TOTP secret", b.user)
	case e.Class == "AtxIsBusyError":
		return "another ATX button press is in progress (a long press takes about 6.5 s): retry in a few seconds"
	case e.Class == "MsdIsBusyError":
		return "the PiKVM's drive is busy with another operation (an upload holds it until done): retry when bench_media list shows it idle"
	case e.Class == "MsdConnectedError":
		return "the drive is connected to the machine: eject it first (kvmd changes nothing while it is connected)"
	case e.Class == "MsdUnknownImageError":
		return "no image of that name is in the PiKVM's storage: bench_media list shows the names"
	case e.Class == "MsdImageExistsError":
		return "an image of that name is already in the PiKVM's storage: mount it by name, or remove it on the PiKVM first"
	case e.Class == "AtxDisabledError":
		return "this PiKVM has no ATX board wired (or ATX is disabled in kvmd): power cannot be switched from here"
	case e.Class == "MsdDisabledError" || e.Class == "MsdOfflineError":
		return "this PiKVM's mass-storage drive is disabled or not found (kvmd's msd plugin): virtual media is unavailable"
	case e.Status == 502 || e.Status == 504:
		return "nginx on the PiKVM could not reach kvmd: it may be restarting; retry in a minute"
	}
	return ""
}

// --- requests -------------------------------------------------------------------------------------------------

// request sends one API call (path below /api) and answers the response
// for a 200; any other status is an *APIError.
func (b *Bench) request(ctx context.Context, op, method, path string, query url.Values, body io.Reader) (*http.Response, error) {
	u := b.base + "/api" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, b.wrapErr(op, err)
	}
	b.authHeaders(req.Header)
	switch body := body.(type) {
	case nil:
	case *sizedReader:
		req.ContentLength = body.size // kvmd's /msd/write requires it
		req.Header.Set("Content-Type", "application/octet-stream")
	default:
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, b.wrapErr(op, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, b.apiError(op, resp)
	}
	return resp, nil
}

// call sends one API call and decodes the envelope's result into out (nil
// to ignore it).
func (b *Bench) call(ctx context.Context, op, method, path string, query url.Values, body io.Reader, out any) error {
	resp, err := b.request(ctx, op, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&env); err != nil {
		return b.wrapErr(op, fmt.Errorf("the answer is not kvmd's JSON: %w", err))
	}
	if !env.OK {
		return b.wrapErr(op, errors.New(`kvmd answered 200 with "ok": false`))
	}
	if out != nil {
		if err := json.Unmarshal(env.Result, out); err != nil {
			return b.wrapErr(op, fmt.Errorf("decoding kvmd's answer: %w", err))
		}
	}
	return nil
}
