// Package pve is the Proxmox VE backend: VMs, tasks, snapshots, installer
// media, the guest agent and the VNC console of a PVE cluster, reached with
// an API token over HTTPS (go-proxmox's client for the API calls,
// gorilla/websocket for the console, the rfb package for the screen).
//
// Sharing: a bench's Backends share one Cluster (NewCluster; hostapi may
// make a Backend per request). In it, each token has its own tokenState,
// keyed by endpoint (or BackendID) + token + trust roots, so a token never
// sees another's answers, a wrong secret never reuses a right one's cache,
// and one token's refusals never change another's state: caches (identity
// 60 s; the VM list and the members of its pools 10 s, re-read after any
// mutation), consoles (one per VM, closed after 15 idle minutes or when
// the VM stops), task memos, the VMs it created, a 401 it got. What
// carries no credential (vmid -> node, the invalidation counter) is shared
// by the Cluster. Per-VM locks belong to the caller, keyed by LockKey.
//
// Ownership without Pool.Audit: PVE shows a VM's pool in /cluster/resources
// only to a token with Pool.Audit on it, and adds a new VM to its pool only
// as the last step of its clone or create task (until then only root sees
// it). So a VM's Pool comes from its row if shown; else from this token's
// record of having created it into that pool (which also answers VM and
// TaskStatus while the clone runs, and refuses its name to a second
// clone); else from GET /pools?poolid= members (PVE >= 8.1 answers it
// without Pool.Audit; before 8.1 it needs Pool.Audit).
//
// Decisions worth knowing:
//   - Stop is PVE's qmshutdown with timeout=60 and forceStop=1: ACPI (or
//     the agent, if the VM's agent option is on) then a hard stop, in one
//     task. Start of a running and Stop of a stopped VM answer a finished
//     no-op task only this process knows.
//   - A task that ended "WARNINGS: n" is a success: TaskStatus answers
//     ExitStatus "OK" and logs the warnings.
//   - go-proxmox's own errors lose PVE's reasons (401/403, 500) and take a
//     596 for success; every answer >= 400 is turned into an *APIError with
//     PVE's message before go-proxmox sees it. Errors carry their hint
//     (backends.Hinted): a 401, 403, 596 or other 5xx, an untrusted
//     certificate, a token with no pool.
//   - Nothing is retried here (hostapi owns retries): every call is one
//     request, except clone/create again with another vmid after PVE
//     refused the first, and one fresh lookup of a VM whose cached node
//     was wrong. A token PVE answered 401 is not sent again for 30 s (PVE
//     delays every 401 by 3 s).
//   - Guest agent calls are one request each: "agent not running" and
//     "got timeout" are errors wrapping backends.ErrAgentNotRunning (a
//     stopped VM's wrap ErrNotRunning too), and an exec or file-write is
//     never sent twice. Exec output and file-read content come back from
//     PVE as latin-1 characters and are turned back into bytes; non-ASCII
//     commands and environments travel as a base64 shell script. ReadFile
//     sees at most the first 16 MiB of a file; WriteFile sends files above
//     45 KiB through exec + cat in 60 KiB chunks (POSIX guests), waiting
//     for each through a busy agent.
package pve

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/poligon/poligon/backends"
)

// Config says which cluster to reach and with which token.
type Config struct {
	URL       string // https://host:8006, with or without /api2/json
	Token     string // USER@REALM!TOKENID=SECRET (split on the last '=')
	CAFile    string // PEM; else SSL_CERT_FILE / SSL_CERT_DIR; else the system store
	BackendID string // optional: aliases of one cluster share caches (letters, digits, . _ -; <= 64 bytes)
	Storage   string // default storage for new disks (create from ISO, add disk)
	Logger    *slog.Logger
	// Cluster is the bench's shared state (caches, consoles, what each
	// token created): one per bench, from NewCluster. Nil makes a private
	// one, which only this Backend uses (tests).
	Cluster *Cluster
	// ConsoleDump receives the raw RFB bytes every console's websocket
	// carries from the server (rfb.Config.Dump); nil records nothing.
	ConsoleDump io.Writer
}

// Backend is one token on one PVE cluster. It is cheap to make: hostapi may
// make one per request, since the caches live in the bench's Cluster.
type Backend struct {
	api      *proxmox.Client
	http     *http.Client
	base     string // https://host:8006/api2/json
	host     string // host:8006
	endpoint string // BackendID, or https://host:8006
	tokenID  string // user@realm!tokenid: safe to log
	token    string // the whole token; never logged
	secret   string // for scrubbing error texts
	owner    string
	storage  string
	log      *slog.Logger
	dump     io.Writer
	tls      *tlsSetup
	cl       *Cluster
	tok      *tokenState
}

var (
	_ backends.Lifecycle = (*Backend)(nil)
	_ backends.Tasks     = (*Backend)(nil)
	_ backends.Snapshots = (*Backend)(nil)
	_ backends.Media     = (*Backend)(nil)
	_ backends.Guest     = (*Backend)(nil)
	_ backends.Console   = (*Backend)(nil)
	_ backends.Identity  = (*Backend)(nil)
)

// requestTimeout bounds one API call whose context has no deadline: a hung
// node must not hang a caller for ever.
const requestTimeout = 2 * time.Minute

var backendIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// New checks the configuration and makes a Backend; it does not call the
// cluster. A malformed token, URL or backend id, or an unreadable CA is an
// error here.
func New(cfg Config) (*Backend, error) {
	base, host, endpoint, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	tokenID, secret, err := splitToken(cfg.Token)
	if err != nil {
		return nil, err
	}
	owner, err := OwnerFromTokenID(tokenID)
	if err != nil {
		return nil, err
	}
	if cfg.BackendID != "" {
		if !backendIDPattern.MatchString(cfg.BackendID) {
			return nil, fmt.Errorf("pve: backend id %q: use ASCII letters, digits, '.', '_' and '-', at most 64 bytes", cfg.BackendID)
		}
		endpoint = cfg.BackendID
	}
	ts, err := loadTLS(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b := &Backend{
		base: base, host: host, endpoint: endpoint, tokenID: tokenID, token: cfg.Token, secret: secret,
		owner: owner, storage: cfg.Storage, tls: ts, dump: cfg.ConsoleDump,
		log: log.With("backend", "pve", "endpoint", endpoint, "token", tokenID),
	}
	b.http = &http.Client{
		Transport: &errorTransport{next: ts.transport(), scrub: b.scrub, log: b.log},
		Timeout:   requestTimeout,
	}
	b.api = proxmox.NewClient(base,
		proxmox.WithHTTPClient(b.http),
		proxmox.WithAPIToken(tokenID, secret),
		proxmox.WithUserAgent("poligon"),
		proxmox.WithLogger(quietLogger{}),
	)
	b.cl = cfg.Cluster
	if b.cl == nil {
		b.cl = NewCluster()
	}
	if err := b.cl.bind(endpoint); err != nil {
		return nil, err
	}
	b.tok = b.cl.token(tokenKey(endpoint, cfg.Token, ts.key))
	return b, nil
}

// Kind is "pve".
func (b *Backend) Kind() string { return "pve" }

// String names the backend for messages: "pve https://host:8006" (or the
// backend id).
func (b *Backend) String() string { return "pve " + b.endpoint }

// LockKey identifies the cluster for per-VM locks: the backend id, or the
// endpoint URL. It does not depend on the token, since a lock belongs to
// the machine, not to the caller.
func (b *Backend) LockKey() string { return "pve:" + b.endpoint }

// TokenID is the token's USER@REALM!TOKENID part (no secret): safe to log.
func (b *Backend) TokenID() string { return b.tokenID }

// Owner is the owner name derived from the token id.
func (b *Backend) Owner() string { return b.owner }

func parseURL(raw string) (base, host, endpoint string, err error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return "", "", "", fmt.Errorf("pve: API URL %q: want https://host:8006", raw)
	}
	if u.Scheme != "https" {
		return "", "", "", fmt.Errorf("pve: API URL %q: the scheme must be https (PVE serves its API over TLS only)", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", "", fmt.Errorf("pve: API URL %q: want just https://host:8006 (no user, query or fragment)", raw)
	}
	switch p := strings.TrimRight(u.Path, "/"); p {
	case "", "/api2/json":
	default:
		return "", "", "", fmt.Errorf("pve: API URL %q: unexpected path %q (want none or /api2/json)", raw, p)
	}
	host = strings.ToLower(u.Host)
	endpoint = "https://" + host
	return endpoint + "/api2/json", host, endpoint, nil
}

// errBadToken never quotes the token: what is wrong with it could be in
// the secret.
func errBadToken(why string) error {
	return fmt.Errorf("pve: the API token must look like USER@REALM!TOKENID=SECRET: %s", why)
}

func splitToken(tok string) (id, secret string, err error) {
	tok = strings.TrimSpace(tok)
	i := strings.LastIndex(tok, "=")
	if i < 0 {
		return "", "", errBadToken("no '=' before the secret")
	}
	id, secret = tok[:i], tok[i+1:]
	if secret == "" {
		return "", "", errBadToken("the secret after the last '=' is empty")
	}
	user, tokenName, ok := strings.Cut(id, "!")
	if !ok || tokenName == "" {
		return "", "", errBadToken("no '!TOKENID' in the token id")
	}
	name, realm, ok := strings.Cut(user, "@")
	if !ok || name == "" || realm == "" {
		return "", "", errBadToken("no USER@REALM in the token id")
	}
	return id, secret, nil
}

// ErrNoOwner is returned for a token id whose user part leaves no owner.
var ErrNoOwner = errors.New("cannot derive owner from token id")

// OwnerFromTokenID derives the owner name from a token id: the user part,
// lowercased, stripped to [a-z0-9] (Ivan.Petrov@ad!tok -> ivanpetrov).
func OwnerFromTokenID(tokenID string) (string, error) {
	user, _, _ := strings.Cut(tokenID, "@")
	var b strings.Builder
	for _, r := range strings.ToLower(user) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("pve: %w %q", ErrNoOwner, tokenID)
	}
	return b.String(), nil
}

// tokenKey identifies endpoint + token (+ trust roots) without keeping the
// secret: a token id with a wrong secret gets another tokenState (and its
// own failing calls), never the cached answers of the right one; nor does
// a Backend that trusts other roots.
func tokenKey(endpoint, token, trust string) string {
	sum := sha256.Sum256([]byte(endpoint + "\x00" + token + "\x00" + trust))
	return hex.EncodeToString(sum[:16])
}

// quietLogger keeps go-proxmox silent: its debug lines carry request
// bodies (file contents, commands), which must not reach our logs.
type quietLogger struct{}

func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Warnf(string, ...any)  {}
func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Debugf(string, ...any) {}
