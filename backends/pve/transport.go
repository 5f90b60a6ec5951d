package pve

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Errors for PVE's refusals, wrapped by APIError.
var (
	// ErrUnauthenticated is a 401: the token itself was refused.
	ErrUnauthenticated = errors.New("the API token was refused")
	// ErrPermission is a 403: the token lacks a privilege.
	ErrPermission = errors.New("permission denied")
	// ErrUnreachable is a 596 (or 502/503): pveproxy could not reach the
	// node that serves the call.
	ErrUnreachable = errors.New("node unreachable")
)

// APIError is an error answer of the PVE API: its HTTP status, the message
// PVE gave (body "message", else the reason phrase) and any parameter
// errors. It unwraps to the backends and pve sentinel errors its status and
// message imply (ErrNotFound, ErrAgentNotRunning, ErrPermission, ...).
type APIError struct {
	Method  string
	Path    string // below /api2/json, without the query
	Status  int
	Message string
	Params  map[string]string
}

func (e *APIError) Error() string {
	msg := e.head() + ": " + e.Message
	if len(e.Params) > 0 {
		keys := make([]string, 0, len(e.Params))
		for k := range e.Params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + e.Params[k]
		}
		msg += " (" + strings.Join(parts, "; ") + ")"
	}
	return msg
}

func (e *APIError) head() string {
	return fmt.Sprintf("PVE answered %d to %s %s", e.Status, e.Method, e.Path)
}

// SafeLen marks where PVE's own message begins (logs.Payloaded): a log
// line keeps the status and the request, not the body's text, which can
// echo what was sent.
func (e *APIError) SafeLen() int { return len(e.head()) }

var (
	notRunningText = regexp.MustCompile(`VM \d+ (is )?not running`)
	notFoundText   = regexp.MustCompile(`does not exist|no such task|not found|no such VM`)
)

// Unwrap answers the sentinel errors e stands for.
func (e *APIError) Unwrap() []error {
	var out []error
	m := e.Message
	switch {
	case e.Status == 401:
		out = append(out, ErrUnauthenticated)
	case e.Status == 403:
		out = append(out, ErrPermission)
	case e.Status == 596 || e.Status == 502 || e.Status == 503:
		out = append(out, ErrUnreachable)
	}
	switch {
	case strings.Contains(m, "No QEMU guest agent configured"):
		out = append(out, backends.ErrAgentDisabled) // waiting will not help
	case strings.Contains(m, "guest agent is not running"), strings.Contains(m, "got timeout"):
		// "got timeout": an agent busy with IO, or one that stopped
		// answering; asking again later may help, which is the caller's
		// decision (a command sent may have run).
		out = append(out, backends.ErrAgentNotRunning)
	case notRunningText.MatchString(m):
		out = append(out, backends.ErrNotRunning)
	case e.Status == 404 || notFoundText.MatchString(m):
		out = append(out, backends.ErrNotFound)
	case strings.Contains(m, "already exists") || strings.Contains(m, "already used"):
		out = append(out, backends.ErrExists)
	}
	return out
}

// Hints of PVE's refusals: what the model (or its operator) can do.
const (
	hintUnauthenticated = "PVE refused the API token: check its id and secret (X-PVE-Token over HTTP; the bench's token or PVE_TOKEN over stdio) and that the token is neither expired nor revoked"
	hintPermission      = "the Proxmox token lacks the privilege named above: ask the PVE administrator to grant it on your pool (the README lists the privileges each tool needs)"
	hintUnreachable     = "the Proxmox node did not answer (PVE's 596/502/503): retry in a minute; if it persists the node is down, tell the operator"
	hintServer          = "the message is Proxmox's own: retry once; if it fails again tell the operator (the PVE task log has details)"
	hintTLS             = "the bench's TLS certificate is not trusted: the operator sets ca_file for the bench (or SSL_CERT_FILE / SSL_CERT_DIR) to the CA that signs it"
	hintNoPool          = "ask the Proxmox administrator to grant your token VM.Allocate on a pool (e.g. the PVEVMAdmin role on /pool/<name>)"
)

// Hint says what to do about a refusal (backends.Hinted). Answers that
// mean "not found", "exists", "not running" or an agent problem have none:
// the caller knows better what to do about those.
func (e *APIError) Hint() string {
	switch {
	case e.Status == 401:
		return hintUnauthenticated
	case e.Status == 403:
		return hintPermission
	case e.Status == 596 || e.Status == 502 || e.Status == 503:
		return hintUnreachable
	}
	for _, sentinel := range e.Unwrap() {
		if sentinel != nil {
			return ""
		}
	}
	if e.Status >= 500 {
		return hintServer
	}
	return ""
}

var _ backends.Hinted = (*APIError)(nil)

// errorTransport turns every answer of status >= 400 into an *APIError
// before go-proxmox sees it: go-proxmox keeps only the status line of a
// 500, turns 401/403 into a reasonless ErrNotAuthorized and takes a 596 for
// success.
//
// It also writes each request's debug line, with the req of the context
// it was sent with: method, path (no query), status and ms; never a header.
type errorTransport struct {
	next  http.RoundTripper
	scrub func(string) string
	log   *slog.Logger
}

func (t *errorTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	res, err := t.next.RoundTrip(req)
	if t.log != nil && t.log.Enabled(req.Context(), slog.LevelDebug) {
		attrs := []any{"method", req.Method, "path", strings.TrimPrefix(req.URL.Path, "/api2/json"), "ms", time.Since(start).Milliseconds()}
		if err != nil {
			attrs = append(attrs, "err", t.scrub(err.Error()))
		} else {
			attrs = append(attrs, "status", res.StatusCode)
		}
		t.log.DebugContext(req.Context(), "pve: request", attrs...)
	}
	if err != nil || res.StatusCode < 400 {
		return res, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var doc struct {
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
	}
	_ = json.Unmarshal(body, &doc)
	msg := strings.TrimSpace(doc.Message)
	if msg == "" {
		msg = strings.TrimSpace(strings.TrimPrefix(res.Status, fmt.Sprint(res.StatusCode)))
	}
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	params := map[string]string{}
	for k, v := range doc.Errors {
		params[k] = t.scrub(strings.TrimSpace(v))
	}
	return nil, &APIError{
		Method:  req.Method,
		Path:    strings.TrimPrefix(req.URL.Path, "/api2/json"),
		Status:  res.StatusCode,
		Message: t.scrub(msg),
		Params:  params,
	}
}

// tlsSetup is the trust configuration of a backend: where its roots come
// from (for error messages) and a transport using them.
type tlsSetup struct {
	key    string // the source and a digest of its certificates
	source string
	config *tls.Config
	rt     *http.Transport
}

func (ts *tlsSetup) transport() http.RoundTripper { return ts.rt }

// Transports carry no credentials (the token is a per-request header), so
// backends with the same roots share one, and its connection pool.
var transports = struct {
	sync.Mutex
	bySource map[string]*tlsSetup
}{bySource: map[string]*tlsSetup{}}

// loadTLS builds the roots: the CA file; else only the files SSL_CERT_FILE
// and SSL_CERT_DIR name; else the system store. Verification is never
// skipped.
func loadTLS(caFile string) (*tlsSetup, error) {
	var pems [][]byte
	var source string
	switch {
	case caFile != "":
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("pve: reading the CA file: %w", err)
		}
		pems, source = [][]byte{data}, "the CA file "+caFile
	case os.Getenv("SSL_CERT_FILE") != "" || os.Getenv("SSL_CERT_DIR") != "":
		var err error
		if pems, source, err = envCerts(); err != nil {
			return nil, err
		}
	default:
		source = "the system trust store"
	}
	h := sha256.New()
	for _, p := range pems {
		h.Write(p)
	}
	key := source + "\x00" + hex.EncodeToString(h.Sum(nil))
	transports.Lock()
	defer transports.Unlock()
	if ts, ok := transports.bySource[key]; ok {
		return ts, nil
	}
	var pool *x509.CertPool
	if pems == nil {
		var err error
		if pool, err = x509.SystemCertPool(); err != nil {
			return nil, fmt.Errorf("pve: reading the system trust store: %w", err)
		}
	} else {
		pool = x509.NewCertPool()
		found := false
		for _, p := range pems {
			found = pool.AppendCertsFromPEM(p) || found
		}
		if !found {
			return nil, fmt.Errorf("pve: %s holds no PEM certificate", source)
		}
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	ts := &tlsSetup{key: key, source: source, config: cfg, rt: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
	}}
	transports.bySource[key] = ts
	return ts, nil
}

// envCerts reads the PEM files SSL_CERT_FILE and SSL_CERT_DIR (a colon
// list of directories) name, and nothing else.
func envCerts() ([][]byte, string, error) {
	var pems [][]byte
	var names []string
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("pve: reading SSL_CERT_FILE: %w", err)
		}
		pems, names = append(pems, data), append(names, "SSL_CERT_FILE="+f)
	}
	if d := os.Getenv("SSL_CERT_DIR"); d != "" {
		for _, dir := range filepath.SplitList(d) {
			entries, err := os.ReadDir(dir)
			if err != nil {
				return nil, "", fmt.Errorf("pve: reading SSL_CERT_DIR: %w", err)
			}
			for _, e := range entries {
				if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
					pems = append(pems, data)
				}
			}
		}
		names = append(names, "SSL_CERT_DIR="+d)
	}
	return pems, strings.Join(names, " and "), nil
}

// certProblem finds a certificate verification failure in err.
func certProblem(err error) error {
	var unknown x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &verify):
		return verify
	case errors.As(err, &unknown):
		return unknown
	case errors.As(err, &host):
		return host
	case errors.As(err, &invalid):
		return invalid
	}
	return nil
}

// wrap names the operation that failed and makes the error clear: PVE's
// answer as it is, a certificate problem with what was trusted, anything
// else scrubbed of the secret.
func (b *Backend) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("pve: %s: %w", op, ae)
	}
	if cp := certProblem(err); cp != nil {
		return &backends.Failure{Err: err, Advice: hintTLS, Text: b.scrub(fmt.Sprintf(
			"pve: %s: the TLS certificate of %s is not trusted (checked against %s): %v", op, b.host, b.tls.source, cp))}
	}
	return &backends.Failure{Err: err, Text: b.scrub(fmt.Sprintf("pve: %s: %v", op, err))}
}

// scrub removes the token secret from a text, wherever it came from.
func (b *Backend) scrub(s string) string {
	if b.secret == "" {
		return s
	}
	return strings.ReplaceAll(s, b.secret, "<secret>")
}
