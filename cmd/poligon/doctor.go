package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/ocr"
	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
)

// finding is one line of the doctor's report.
type finding struct {
	status string // ok | FAIL | skip
	what   string
	todo   string // FAIL: what to do; skip: why
}

func (f finding) String() string {
	switch f.status {
	case "ok":
		return "ok   " + f.what
	case "skip":
		return "skip " + f.what + ": " + f.todo
	}
	return "FAIL " + f.what + ": " + f.todo
}

func ok(format string, args ...any) finding {
	return finding{status: "ok", what: fmt.Sprintf(format, args...)}
}
func fail(what, todo string) finding { return finding{status: "FAIL", what: what, todo: todo} }
func skip(what, why string) finding  { return finding{status: "skip", what: what, todo: why} }

// doctor checks the host as an operator would before starting the
// service: one line per check, exit 1 when any fails. Every network check
// is bounded by --timeout and they run at once, so a bench that never
// answers costs one timeout, not a hang.
func doctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	timeout := fs.Duration("timeout", 10*time.Second, "bound of each bench call and TLS handshake")
	if err := fs.Parse(args); err != nil {
		return exitError(2)
	}
	cfg, err := cf.load(stderr) // a broken config prints its problems
	if err != nil {
		return err
	}
	var out []finding
	if cfg.File != "" {
		out = append(out, ok("config %s", cfg.File))
	} else {
		out = append(out, ok("config: none, the defaults and the environment"))
	}
	out = append(out, caFinding())
	out = append(out, dirFindings(cfg)...)
	out = append(out, ocrFinding(cfg))
	out = append(out, qemuFindings(cfg)...)
	out = append(out, remoteFindings(ctx, cfg, *timeout)...)
	failed := 0
	for _, f := range out {
		fmt.Fprintln(stdout, f)
		if f.status == "FAIL" {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d checks failed\n", failed, len(out))
		return exitError(1)
	}
	fmt.Fprintf(stdout, "all %d checks passed\n", len(out))
	return nil
}

func caFinding() finding {
	if p := caProblem(os.Getenv); p != "" {
		return fail(p, caHint)
	}
	n, source, _ := outboundCAs(os.Getenv)
	if source == "" {
		return ok("outbound TLS: the system trust store")
	}
	return ok("outbound TLS: %d CA certificates from %s", n, source)
}

// dirFindings: the directories poligon writes must be writable by this
// user (a read-only volume or a root-owned directory fails at the first
// call otherwise); the ones it reads must exist.
func dirFindings(cfg *config.Config) []finding {
	var out []finding
	seen := map[string]bool{}
	writable := func(key, dir string, create bool) {
		if dir == "" || seen[dir] {
			return
		}
		seen[dir] = true
		out = append(out, writableDir(key, dir, create))
	}
	for _, b := range cfg.Benches {
		if b.Type == "qemu" {
			writable("data_dir", b.DataDir, true)
		}
	}
	writable("state_dir", cfg.StateDir, true)
	if cfg.EvidenceDir == "" {
		out = append(out, skip("evidence_dir", "unset: every path= argument is refused (set POLIGON_MCP_EVIDENCE to allow saving screenshots)"))
	} else {
		writable("evidence_dir", cfg.EvidenceDir, false)
	}
	if cfg.ScriptsDir != "" {
		if st, err := os.Stat(cfg.ScriptsDir); err != nil || !st.IsDir() {
			out = append(out, fail("scripts_dir "+cfg.ScriptsDir, "not a directory: create it or fix scripts_dir / POLIGON_MCP_SCENARIOS"))
		} else {
			out = append(out, ok("scripts_dir %s", cfg.ScriptsDir))
		}
	}
	if cfg.AuditLog != "" && cfg.AuditLog != "-" {
		writable("audit_log's directory", filepath.Dir(cfg.AuditLog), true)
	}
	writable("events dir", cfg.Events.Dir, true)
	return out
}

// writableDir writes and removes a file in dir; a directory poligon makes
// itself (create) may be missing while its nearest parent is writable.
func writableDir(key, dir string, create bool) finding {
	what := key + " " + dir
	probe := dir
	for {
		st, err := os.Stat(probe)
		if err == nil && !st.IsDir() {
			return fail(what, probe+" is not a directory: point "+key+" elsewhere")
		}
		if err == nil {
			break
		}
		if !create || !errors.Is(err, os.ErrNotExist) || filepath.Dir(probe) == probe {
			return fail(what, fmt.Sprintf("%v: create it (mkdir -p %s) and give it to uid %d", err, dir, os.Getuid()))
		}
		probe = filepath.Dir(probe)
	}
	f, err := os.CreateTemp(probe, ".poligon-doctor-*")
	if err != nil {
		return fail(what, fmt.Sprintf("not writable by uid %d (%v): chown it to that user, or mount the volume read-write", os.Getuid(), err))
	}
	f.Close()
	os.Remove(f.Name())
	if probe != dir {
		return ok("%s: missing, poligon creates it in %s", what, probe)
	}
	return ok("%s: writable", what)
}

func ocrFinding(cfg *config.Config) finding {
	if cfg.OCR.Disabled {
		return skip("OCR", "[ocr] disabled = true")
	}
	// Doctor starts an engine, as a first ui_read would: a library that is
	// there but does not load, or data tesseract refuses, shows here.
	r := ocr.New(ocr.Config{Languages: cfg.OCR.Languages, Workers: 1})
	defer r.Close()
	if err := r.Check(); err != nil {
		return fail("OCR (tesseract, "+cfg.OCR.Languages+")", err.Error()+"; ui_read and label clicks need it (Debian: libtesseract5 and tesseract-ocr-<lang>)")
	}
	return ok("OCR: libtesseract and the language data for %s", cfg.OCR.Languages)
}

// The firmware the local backend gives UEFI templates (Debian's ovmf).
var ovmfFiles = []string{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"}

// qemuFindings checks what the local backend runs, when a qemu bench is
// configured: QEMU and its accelerator, qemu-img, OVMF, vde2.
func qemuFindings(cfg *config.Config) []finding {
	var accels []string
	for _, b := range cfg.Benches {
		if b.Type == "qemu" && !slices.Contains(accels, b.Accel) {
			accels = append(accels, b.Accel)
		}
	}
	if len(accels) == 0 {
		return []finding{skip("QEMU", "no qemu bench configured: the local backend is not used")}
	}
	var out []finding
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		out = append(out, fail("qemu-system-x86_64", "not found: install Debian's qemu-system-x86 (or drop the qemu bench: this host then serves remote benches only)"))
	} else {
		out = append(out, ok("qemu-system-x86_64 %s (%s)", bin, firstLine(bin, "--version")))
		for _, a := range accels {
			acc, err := qemu.ResolveAccel("qemu-system-x86_64", a) // the driver's key: its probe then is this one
			switch {
			case err != nil:
				out = append(out, fail("accelerator", err.Error()))
			case acc.Mode == qemu.AccelTCG:
				out = append(out, ok("accelerator: tcg, VMs run under emulation (%s: %s)", acc.Requested, acc.Reason))
			default:
				out = append(out, ok("accelerator: %s", acc))
			}
		}
	}
	if p, err := exec.LookPath("qemu-img"); err != nil {
		out = append(out, fail("qemu-img", "not found: install Debian's qemu-utils (clones are qcow2 overlays)"))
	} else {
		out = append(out, ok("qemu-img %s", p))
	}
	missing := []string{}
	for _, f := range ovmfFiles {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		out = append(out, fail("OVMF", "no "+strings.Join(missing, ", ")+": install Debian's ovmf (templates with firmware = uefi need it)"))
	} else {
		out = append(out, ok("OVMF %s", ovmfFiles[0]))
	}
	for _, b := range []string{"vde_switch", "slirpvde"} {
		if _, err := exec.LookPath(b); err != nil {
			out = append(out, fail(b, "not found: install Debian's vde2 (a stand's machines share its switch)"))
		} else {
			out = append(out, ok("%s (stands' network)", b))
		}
	}
	return out
}

func firstLine(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		return err.Error()
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// remoteFindings runs every bench call and TLS handshake at once, each
// under its own deadline, and answers them in the config's order.
func remoteFindings(ctx context.Context, cfg *config.Config, timeout time.Duration) []finding {
	var jobs []func(context.Context) []finding
	root := app.NewRoot()
	for _, bc := range cfg.Benches {
		jobs = append(jobs, func(ctx context.Context) []finding { return benchFindings(ctx, root, cfg, bc, timeout) })
	}
	for _, ep := range tlsEndpoints(cfg) {
		jobs = append(jobs, func(ctx context.Context) []finding { return []finding{certFinding(ctx, ep)} })
	}
	results := make([][]finding, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			results[i] = job(ctx)
		}()
	}
	wg.Wait()
	return slices.Concat(results...)
}

// benchFindings opens a bench as the server would and makes one read-only
// call with the credentials this host has (a trusted transport: the
// config's own token or PVE_TOKEN, the config's owner).
func benchFindings(ctx context.Context, root *app.Root, cfg *config.Config, bc config.Bench, timeout time.Duration) []finding {
	what := fmt.Sprintf("bench %s (%s)", bc.Name, bc.Type)
	// A backend that ignores the deadline is left behind, not waited for.
	done := make(chan []finding, 1)
	go func() { done <- doctorCall(ctx, root, cfg, bc, what) }()
	select {
	case out := <-done:
		return out
	case <-ctx.Done():
		return []finding{fail(what, fmt.Sprintf("no answer from %s in %s: check the address, the firewall and that the service runs", hostOf(bc.API), timeout))}
	}
}

func doctorCall(ctx context.Context, root *app.Root, cfg *config.Config, bc config.Bench, what string) []finding {
	b, err := root.Open(bc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return []finding{fail(what, withHint(err))}
	}
	defer b.Close()
	var out []finding
	for _, p := range b.Problems() {
		out = append(out, fail(what, p))
	}
	if bc.Type == "pve" && bc.Token == "" {
		return append(out, skip(what+" read-only call", "no token here (clients send their own over HTTP); set the bench's token or PVE_TOKEN to check one"))
	}
	be, _, err := b.Open(ctx, hostapi.Credentials{Owner: cfg.Owner, Token: bc.Token})
	if err != nil {
		return append(out, fail(what, withHint(err)))
	}
	switch be := be.(type) {
	case backends.Identity:
		owner, pools, err := be.Identity(ctx)
		if err != nil {
			return append(out, fail(what, withHint(err)))
		}
		return append(out, ok("%s: the token of owner %s can allocate in %d pools (%s)", what, owner, len(pools), strings.Join(pools, ", ")))
	case backends.Power:
		state, err := be.PowerState(ctx)
		if err != nil {
			return append(out, fail(what, withHint(err)))
		}
		return append(out, ok("%s: power %s", what, state))
	case backends.Lifecycle:
		tpls, err := be.Templates(ctx)
		if err != nil {
			return append(out, fail(what, withHint(err)))
		}
		var names []string
		for _, t := range tpls {
			names = append(names, t.Name)
		}
		if len(tpls) == 0 {
			return append(out, ok("%s: no templates yet (make tiny-template builds one; or put yours in templates/)", what))
		}
		return append(out, ok("%s: %d templates (%s)", what, len(tpls), strings.Join(names, ", ")))
	}
	return append(out, skip(what+" read-only call", "the bench has none"))
}

func withHint(err error) string {
	if h := hostapi.HintOf(err); h != "" {
		return err.Error() + "; " + h
	}
	return err.Error()
}

func hostOf(api string) string {
	if u, err := url.Parse(api); err == nil && u.Host != "" {
		return u.Host
	}
	return "the bench"
}

// endpoint is a TLS server poligon calls and what it trusts there.
type endpoint struct {
	name, host string // host:port
	caFile     string
	pin        string
}

func tlsEndpoints(cfg *config.Config) []endpoint {
	var out []endpoint
	seen := map[string]bool{}
	add := func(name, api, caFile, pin string) {
		u, err := url.Parse(api)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "443")
		}
		if key := host + "\x00" + caFile + "\x00" + pin; !seen[key] {
			seen[key] = true
			out = append(out, endpoint{name: name, host: host, caFile: caFile, pin: pin})
		}
	}
	for _, b := range cfg.Benches {
		add("bench "+b.Name, b.API, b.CAFile, b.PinSHA256)
	}
	add("vision model", cfg.Vision.API, "", "")
	add("grounding model", cfg.Grounding.API, "", "")
	add("planner model", cfg.Planner.API, "", "")
	return out
}

// certFinding shakes hands with the endpoint, verifying its certificate
// as poligon's calls do: the CA file, else the SSL_CERT_* files, else the
// system store; a pin alone checks the leaf.
func certFinding(ctx context.Context, ep endpoint) finding {
	what := fmt.Sprintf("certificate of %s (%s)", ep.host, ep.name)
	cfg, trust, err := trustFor(ep)
	if err != nil {
		return fail(what, err.Error())
	}
	host, _, _ := net.SplitHostPort(ep.host)
	cfg.ServerName = host
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", ep.host)
	if err != nil {
		if ctx.Err() != nil {
			return fail(what, "no TLS handshake before the deadline: check the address and the firewall")
		}
		return fail(what, fmt.Sprintf("%v (trusting %s): put the CA that signs it into ca_file or SSL_CERT_DIR, or pin it", err, trust))
	}
	defer conn.Close()
	leaf := conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
	days := int(time.Until(leaf.NotAfter).Hours() / 24)
	return ok("%s: verified by %s, valid until %s (%d days)", what, trust, leaf.NotAfter.Format("2006-01-02"), days)
}

func trustFor(ep endpoint) (*tls.Config, string, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	trust := "the system trust store"
	switch {
	case ep.caFile != "":
		data, err := os.ReadFile(ep.caFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading ca_file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(data) {
			return nil, "", fmt.Errorf("ca_file %s holds no PEM certificate", ep.caFile)
		}
		trust = "the CA file " + ep.caFile
	case os.Getenv("SSL_CERT_FILE") != "" || os.Getenv("SSL_CERT_DIR") != "":
		_, trust, _ = outboundCAs(os.Getenv) // x509's system pool is those files then
	}
	if ep.pin == "" {
		return cfg, trust, nil
	}
	want, err := hex.DecodeString(strings.NewReplacer(":", "", " ", "", "-", "").Replace(strings.TrimSpace(ep.pin)))
	if err != nil || len(want) != sha256.Size {
		return nil, "", errors.New("pin_sha256 is not a SHA-256 fingerprint (64 hex digits, colons allowed)")
	}
	if ep.caFile == "" {
		cfg.InsecureSkipVerify = true // the pin is the trust, as in the bench's own client
		trust = "the pinned certificate"
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if got := sha256.Sum256(cs.PeerCertificates[0].Raw); hex.EncodeToString(got[:]) != hex.EncodeToString(want) {
			return fmt.Errorf("the certificate's SHA-256 is %x, not the pinned one", got)
		}
		return nil
	}
	return cfg, trust, nil
}
