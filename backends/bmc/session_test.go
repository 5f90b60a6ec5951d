package bmc

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/bmc/redfishtest"
)

// rawClient talks to a fake directly, trusting its certificate.
func rawClient(s *redfishtest.Server) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CertPEM)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, InsecureSkipVerify: true, // MegaRAC's names ami.com: checked below by fingerprint instead
	}}}
}

// leakSessions logs in n times and never logs out, as a crashed tool does.
func leakSessions(t *testing.T, s *redfishtest.Server, n int) {
	t.Helper()
	c := rawClient(s)
	for range n {
		body, _ := json.Marshal(map[string]string{"UserName": testUser, "Password": testPassword})
		res, err := c.Post(s.URL+"/redfish/v1/SessionService/Sessions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("leaking a session: %s", res.Status)
		}
	}
}

// Every path closes its session: successes, a wrong password, a refused
// reset, a BMC that cannot fetch an image, a context cancelled mid-way and
// one cancelled before the call.
func TestSessionsClosedOnEveryPath(t *testing.T) {
	machine(t)
	ensureOn(t)
	var cancelOn sync.Map // request path -> cancel func, to cancel mid-operation
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC, PowerLag: 2 * time.Second,
		Observe: func(r redfishtest.Request) {
			if f, ok := cancelOn.Load(r.Body); ok {
				f.(context.CancelFunc)()
			}
		}})
	b := benchFor(t, fake, DialectMegaRAC)
	wrong := benchFor(t, fake, DialectMegaRAC, func(c *Config) { c.Password = "not-the-password" })
	ctx := ctxT(t)
	var errs []error

	if _, err := b.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := wrong.PowerState(ctx)
	if !errors.Is(err, ErrAuth) || backends.HintOf(err) == "" {
		t.Errorf("wrong password: %v, want ErrAuth with a hint", err)
	}
	errs = append(errs, err)
	forceOffElsewhere(t, fake, "Self") // applied 2 s later
	err = b.Power(ctx, backends.PowerReset)
	if !errors.Is(err, backends.ErrBusy) {
		t.Errorf("a reset while busy: %v, want ErrBusy", err)
	}
	errs = append(errs, err)
	err = b.MediaMount(ctx, backends.MediaMount{URL: "http://127.0.0.1:1/nothing.iso"})
	if err == nil {
		t.Error("an unreachable image was mounted")
	}
	errs = append(errs, err)

	// Cancelled while the cycle waits for the late ForceOff to show.
	fake.Close()
	fake = startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC, PowerLag: 2 * time.Second,
		Observe: func(r redfishtest.Request) {
			if f, ok := cancelOn.Load(r.Body); ok {
				f.(context.CancelFunc)()
			}
		}})
	b = benchFor(t, fake, DialectMegaRAC)
	ensureOn(t)
	cctx, cancel := context.WithCancel(ctx)
	cancelOn.Store(`{"ResetType":"ForceOff"}`, cancel)
	err = b.Power(cctx, backends.PowerCycle)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled cycle: %v, want context.Canceled", err)
	}
	errs = append(errs, err)
	// Cancelled before the call: no session at all.
	created := fake.SessionsCreated()
	err = b.Power(cctx, backends.PowerOn)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a call on a cancelled context: %v", err)
	}
	if n := fake.SessionsCreated(); n != created {
		t.Errorf("a call on a cancelled context logged in")
	}
	errs = append(errs, err)

	if n := fake.OpenSessions(); n != 0 {
		t.Errorf("%d sessions left open after the cancelled cycle", n)
	}
	fake.Close()
	ensureOn(t)
	for _, e := range errs {
		if e != nil {
			secretFree(t, "an error", e.Error()+" "+backends.HintOf(e))
		}
	}
}

// A leaked session makes the fake refuse like a real BMC: the bench's
// error says so in the BMC's words, with what an operator can do.
func TestLeakedSessionsRefused(t *testing.T) {
	machine(t)
	for _, tc := range []struct {
		dialect string
		fake    redfishtest.Dialect
		limit   int
		says    string
	}{
		{DialectMegaRAC, redfishtest.MegaRAC, 4, "SessionLimitExceeded"},
		{DialectDell, redfishtest.Dell, 8, "RAC0218"},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			fake := startFake(t, redfishtest.Options{Dialect: tc.fake})
			b := benchFor(t, fake, tc.dialect)
			ctx := ctxT(t)
			leakSessions(t, fake, tc.limit-1)
			if _, err := b.PowerState(ctx); err != nil { // the last free one
				t.Fatalf("with one session free: %v", err)
			}
			leakSessions(t, fake, 1)
			_, err := b.PowerState(ctx)
			if !errors.Is(err, ErrSessionLimit) || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("with every session leaked: %v, want ErrSessionLimit with the BMC's 503 %s", err, tc.says)
			}
			if h := backends.HintOf(err); !strings.Contains(h, "session") {
				t.Errorf("hint %q", h)
			}
			secretFree(t, "the session-limit error", err.Error())
			if n := fake.OpenSessions(); n != tc.limit {
				t.Errorf("%d sessions open, want the %d leaked", n, tc.limit)
			}
			fake.DropSessions() // the operator resets the BMC
			if _, err := b.PowerState(ctx); err != nil {
				t.Fatalf("after the BMC reset: %v", err)
			}
		})
	}
}

func TestPasswordChangeRequired(t *testing.T) {
	machine(t)
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC, PasswordChangeRequired: true})
	b := benchFor(t, fake, DialectMegaRAC)
	_, err := b.PowerState(ctxT(t))
	if !errors.Is(err, ErrPasswordChange) || !strings.Contains(backends.HintOf(err), "factory password") {
		t.Fatalf("factory password: %v (hint %q)", err, backends.HintOf(err))
	}
	if n := fake.OpenSessions(); n != 0 {
		t.Errorf("%d sessions left open", n)
	}
}

func TestTLS(t *testing.T) {
	machine(t)
	mega := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC})
	dell := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
	ctx := ctxT(t)
	other := strings.Repeat("ab", 32)

	// A pin mismatch: nothing reaches the BMC, no password is sent.
	b := benchFor(t, dell, DialectDell, func(c *Config) { c.PinSHA256 = other })
	_, err := b.PowerState(ctx)
	var pin *PinError
	if !errors.Is(err, ErrTLS) || !errors.As(err, &pin) || pin.Got != dell.Fingerprint || backends.HintOf(err) == "" {
		t.Fatalf("pin mismatch: %v", err)
	}
	if r := dell.Requests(); len(r) != 0 {
		t.Errorf("a mismatched pin still sent requests: %v", r)
	}
	secretFree(t, "the pin error", err.Error()+backends.HintOf(err))
	// Not verified by default: the system roots do not know a BMC's
	// self-signed certificate.
	b = benchFor(t, dell, DialectDell, func(c *Config) { c.PinSHA256 = "" })
	if _, err := b.PowerState(ctx); !errors.Is(err, ErrTLS) || !strings.Contains(backends.HintOf(err), dell.Fingerprint) {
		t.Errorf("default trust: %v (hint %q)", err, backends.HintOf(err))
	}
	// AMI's factory certificate names ami.com: as a CA it does not vouch
	// for 127.0.0.1, so only the pin works.
	b = benchFor(t, mega, DialectMegaRAC, func(c *Config) { c.PinSHA256, c.CAFile = "", mega.CAFile })
	if _, err := b.PowerState(ctx); !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "127.0.0.1 because") {
		t.Errorf("MegaRAC by CA file: %v, want a name mismatch", err)
	}
	// Pin and CA file together: both must hold.
	b = benchFor(t, mega, DialectMegaRAC, func(c *Config) { c.CAFile = mega.CAFile })
	if _, err := b.PowerState(ctx); !errors.Is(err, ErrTLS) {
		t.Errorf("MegaRAC by pin and CA file: %v, want the name mismatch still", err)
	}
	b = benchFor(t, dell, DialectDell, func(c *Config) { c.CAFile = dell.CAFile })
	if _, err := b.PowerState(ctx); err != nil {
		t.Errorf("Dell by pin and CA file: %v", err)
	}
	b = benchFor(t, mega, DialectMegaRAC)
	if _, err := b.PowerState(ctx); err != nil {
		t.Errorf("MegaRAC by pin: %v", err)
	}
	// Insecure works, but only when asked for.
	b = benchFor(t, mega, DialectMegaRAC, func(c *Config) { c.PinSHA256, c.Insecure = "", true })
	if _, err := b.PowerState(ctx); err != nil {
		t.Errorf("insecure: %v", err)
	}
}

// Basic auth, for BMCs without a SessionService: no session is made.
func TestBasicAuth(t *testing.T) {
	machine(t)
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
	b := benchFor(t, fake, DialectDell, func(c *Config) { c.BasicAuth = true })
	ctx := ctxT(t)
	if _, err := b.PowerState(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.MediaList(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fake.SessionsCreated(); n != 0 {
		t.Errorf("basic auth made %d sessions", n)
	}
	for _, r := range fake.Requests() {
		if r.Path != "/redfish/v1" && r.Auth != "basic" {
			t.Errorf("%s %s sent without basic auth", r.Method, r.Path)
		}
	}
	wrong := benchFor(t, fake, DialectDell, func(c *Config) { c.BasicAuth, c.Password = true, "nope-nope" })
	if _, err := wrong.PowerState(ctx); !errors.Is(err, ErrAuth) {
		t.Errorf("wrong basic password: %v, want ErrAuth", err)
	}
}

// Nothing any test logged (benches and fakes share fakeLog) holds the
// password. Runs last in this file's order; the others add to the log.
func TestZZPasswordNeverLogged(t *testing.T) {
	machine(t)
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
	b := benchFor(t, fake, DialectDell)
	ctx := ctxT(t)
	b.PowerState(ctx)
	benchFor(t, fake, DialectDell, func(c *Config) { c.Password = testPassword + "x" }).PowerState(ctx)
	log := fakeLog.String()
	if !strings.Contains(log, "POST /redfish/v1/SessionService/Sessions 201") || !strings.Contains(log, "bmc operation") {
		t.Fatalf("the captured log is not the one expected:\n%s", log)
	}
	secretFree(t, "the captured log", log, "Share-Pw-555")
}

// A dell bench on another vendor's BMC: bmclib's dell provider logs in,
// finds another manufacturer and logs out; the error says what to set.
func TestWrongDialect(t *testing.T) {
	machine(t)
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC})
	_, err := benchFor(t, fake, DialectDell).PowerState(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "does not say it is a dell") || !strings.Contains(backends.HintOf(err), "dialect") {
		t.Fatalf("a dell bench on a MegaRAC: %v (hint %q)", err, backends.HintOf(err))
	}
	if n := fake.OpenSessions(); n != 0 {
		t.Errorf("%d sessions left open", n)
	}
}
