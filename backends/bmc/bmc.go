// Package bmc drives a physical machine through its BMC over Redfish, on
// bmclib v2.3.5 (and the gofish v0.20.0 it brings): power, virtual media,
// the boot override and, where the vendor has one, the screen capture.
//
// # Sessions
//
// Every operation opens its own Redfish session and closes it before it
// returns, on every path: errors, refusals and cancelled contexts
// included. A session kept between operations would expire on the BMC
// after its idle timeout (so the next call fails), hold one of the few
// sessions a BMC allows (a MegaRAC has four or five, an iDRAC eight) while
// nobody uses the bench, and outlive a crashed poligon until that timeout,
// locking operators out; a login and a logout per operation cost two
// requests. Operations on one bench are serialized, so poligon holds at
// most one session per BMC. The operation's transport watches the login
// itself: the session is known even when bmclib fails halfway, and the
// transport deletes it when bmclib's Close did not (gofish's Logout
// ignores a failed DELETE). The login and the logout are not cancelled
// with the operation: an abandoned login could leave a session we never
// learnt of.
//
// # bmclib v2.3.5 and its traps
//
// Only one provider is registered (gofish, or dell for the dell dialect):
// bmclib's default registry opens every provider in parallel, one login
// each. The operation's own Redfish calls (media, boot override, reset
// types) go through gofish on the same session. Worked around:
//   - "soft" (GracefulShutdown) is reported as a failure after it was
//     accepted (SystemPowerOff answers false, nil): the provider is called
//     directly and its nil error is the success.
//   - "reset" without PowerCycle in AllowableValues becomes
//     GracefulShutdown + 9 s + On: poligon never sends bmclib's "reset";
//     it picks ForceRestart or PowerCycle from the AllowableValues, else
//     ForceOff, waits until the BMC reports Off, and powers on.
//   - gofish refuses reset types missing from AllowableValues before
//     sending; Supermicro publishes "GracefulShutdownGracefulRestart":
//     such fused values are read as both, and the action is posted
//     directly.
//   - SetBootDevice always sends BootSourceOverrideMode (UEFI or Legacy),
//     which may switch the machine's boot mode: poligon PATCHes only the
//     target and Once.
//   - bmclib has no media listing and cannot send TransferProtocolType
//     (AMI requires it): media goes through gofish.
//   - TLS is not verified by default in bmclib: poligon gives it a
//     transport that verifies (a CA file, a pinned fingerprint), or skips
//     only when insecure is set.
//   - DEBUG_BMCLIB=true dumps requests, passwords and tokens included, to
//     stdout (which is the MCP channel over stdio): New refuses to run so.
//
// # Console
//
// A dell bench serves backends.Console through the iDRAC's
// ExportServerScreenShot: frames only, no input (Redfish has none). The
// other dialects have no screen capture over Redfish; their Backend() does
// not implement backends.Console, so the capability error names the bench
// and what it lacks. Put a PiKVM on such a machine for its screen.
package bmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/bmc-toolbox/bmclib/v2/providers/dell"
	"github.com/bmc-toolbox/bmclib/v2/providers/redfish"
	"github.com/go-logr/logr"
	"github.com/jacobweinstock/registrar"
	"github.com/stmcginnis/gofish"
	rf "github.com/stmcginnis/gofish/redfish"

	"github.com/poligon/poligon/backends"
)

// Bench is one machine behind a BMC.
type Bench struct {
	cfg   Config
	d     *dialect
	ep    endpoint
	trust string // what TLS trusts, for messages
	base  http.RoundTripper
	log   *slog.Logger
	lock  chan struct{} // one operation at a time

	screenOnce sync.Once
	screen     *screen
}

var (
	_ backends.Power        = (*Bench)(nil)
	_ backends.VirtualMedia = (*Bench)(nil)
)

// New checks cfg and answers the bench; it does not contact the BMC.
func New(cfg Config) (*Bench, error) {
	if os.Getenv("DEBUG_BMCLIB") == "true" {
		return nil, errors.New("bmc: DEBUG_BMCLIB=true makes bmclib print every request, passwords and session tokens included, to stdout: unset it")
	}
	d, err := lookupDialect(cfg.Dialect)
	if err != nil {
		return nil, err
	}
	if cfg.User == "" {
		return nil, errors.New("bmc: no user name")
	}
	ep, err := parseEndpoint(cfg.URL, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bench{cfg: cfg, d: d, ep: ep, log: log, lock: make(chan struct{}, 1)}
	if cfg.HTTP != nil {
		if cfg.CAFile != "" || cfg.PinSHA256 != "" || cfg.Insecure {
			return nil, errors.New("bmc: with an HTTP client given, its transport decides TLS: leave ca_file, pin_sha256 and insecure empty")
		}
		b.base, b.trust = cfg.HTTP.Transport, "the given HTTP client"
		if b.base == nil {
			b.base = http.DefaultTransport
		}
		return b, nil
	}
	tc, trust, err := tlsConfig(cfg, ep.name)
	if err != nil {
		return nil, err
	}
	b.trust = trust
	b.base = &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 15 * time.Second,
		IdleConnTimeout:     30 * time.Second,
	}
	return b, nil
}

// Kind names the bench for messages: "bmc lab3 (megarac https://10.1.2.3:443)".
func (b *Bench) Kind() string {
	if b.cfg.Name != "" {
		return "bmc " + b.cfg.Name + " (" + b.d.name + " " + b.ep.url + ")"
	}
	return "bmc " + b.d.name + " " + b.ep.url
}

// Dialect answers the vendor dialect in use.
func (b *Bench) Dialect() string { return b.d.name }

// Backend answers the bench as the capabilities it serves: with Console
// where the vendor has a screen capture, without it elsewhere, so callers
// that discover capabilities by type assertion see the truth.
func (b *Bench) Backend() backends.Backend {
	if b.d.screen != "" {
		return &screenBench{b}
	}
	return b
}

// NoConsoleReason says why the bench has no Console ("" when it has one).
func (b *Bench) NoConsoleReason() string { return b.d.noScreen }

// provider is the part of a bmclib provider called directly.
type provider interface {
	PowerSet(ctx context.Context, state string) (bool, error)
}

// op is one operation: its transport, bmclib client and session.
type op struct {
	b      *Bench
	ctx    context.Context
	name   string
	w      *wire
	hc     *http.Client
	client *bmclib.Client
	prov   provider
	gf     *gofish.APIClient
	sys    *rf.ComputerSystem
	// secrets are this operation's own (an image share's password), kept
	// out of its error like the BMC's password.
	secrets []string
}

// run performs one operation in its own session.
func (b *Bench) run(ctx context.Context, name string, f func(*op) error) (err error) {
	start := time.Now()
	select {
	case b.lock <- struct{}{}:
	case <-ctx.Done():
		return b.classify(ctx, name, ctx.Err(), nil, nil)
	}
	defer func() { <-b.lock }()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.cfg.Timeout)
		defer cancel()
	}
	o := b.newOp(ctx, name)
	defer func() {
		o.close()
		if err != nil {
			b.log.Info("bmc operation failed", "controller", b.Kind(), "op", name, "took", time.Since(start).Round(time.Millisecond), "err", err.Error())
		} else {
			b.log.Debug("bmc operation", "controller", b.Kind(), "op", name, "took", time.Since(start).Round(time.Millisecond))
		}
	}()
	if err := o.client.Open(ctx); err != nil {
		return b.classify(ctx, name, err, o.w.lastRefusal(), o.w.lastNetError(), o.secrets...)
	}
	if err := f(o); err != nil {
		return b.classify(ctx, name, err, o.w.lastRefusal(), o.w.lastNetError(), o.secrets...)
	}
	return nil
}

func (b *Bench) newOp(ctx context.Context, name string) *op {
	w := &wire{base: b.base, ctx: ctx}
	// A client per operation: bmclib sets its Timeout from the context.
	hc := &http.Client{Transport: w}
	o := &op{b: b, ctx: ctx, name: name, w: w, hc: hc}
	reg := registrar.NewRegistry()
	switch b.d.provider {
	case "dell":
		p := dell.New(b.ep.host, b.cfg.User, b.cfg.Password, logr.Discard(),
			dell.WithHttpClient(hc), dell.WithPort(b.ep.port), dell.WithUseBasicAuth(b.cfg.BasicAuth))
		reg.Register(dell.ProviderName, dell.ProviderProtocol, dell.Features, nil, p)
		o.prov = p
	default:
		p := redfish.New(b.ep.host, b.cfg.User, b.cfg.Password, logr.Discard(),
			redfish.WithHttpClient(hc), redfish.WithPort(b.ep.port), redfish.WithUseBasicAuth(b.cfg.BasicAuth),
			redfish.WithSystemName(b.cfg.System))
		reg.Register(redfish.ProviderName, redfish.ProviderProtocol, redfish.Features, nil, p)
		o.prov = p
	}
	o.client = bmclib.NewClient(b.ep.host, b.cfg.User, b.cfg.Password, bmclib.WithRegistry(reg), bmclib.WithLogger(logr.Discard()))
	return o
}

// close ends the operation's session, whatever happened before.
func (o *op) close() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), sessionCallTimeout)
	defer cancel()
	o.client.Close(ctx)
	if path, _ := o.w.openSession(); path != "" {
		if err := o.w.logout(ctx, o.b.ep.url); err != nil {
			o.b.log.Warn("bmc session may be left open on the BMC", "controller", o.b.Kind(), "session", path, "err", o.b.scrub(err.Error()))
		}
	}
}

// rf answers a gofish client on the operation's session.
func (o *op) rf() (*gofish.APIClient, error) {
	if o.gf != nil {
		return o.gf, nil
	}
	cfg := gofish.ClientConfig{Endpoint: o.b.ep.url, HTTPClient: o.hc}
	if o.b.cfg.BasicAuth {
		cfg.Username, cfg.Password, cfg.BasicAuth = o.b.cfg.User, o.b.cfg.Password, true
	} else {
		path, token := o.w.openSession()
		if token == "" {
			return nil, errors.New("no Redfish session is open")
		}
		cfg.Session = &gofish.Session{ID: path, Token: token}
	}
	gf, err := gofish.ConnectContext(o.ctx, cfg)
	if err != nil {
		return nil, err
	}
	o.gf = gf
	return gf, nil
}

// system answers the bench's ComputerSystem, read afresh (its ETag too).
func (o *op) system() (*rf.ComputerSystem, error) {
	gf, err := o.rf()
	if err != nil {
		return nil, err
	}
	systems, err := gf.Service.Systems()
	if err != nil {
		return nil, err
	}
	want := o.b.cfg.System
	var ids []string
	for _, s := range systems {
		if (want == "" && len(systems) == 1) || s.ID == want {
			o.sys = s
			return s, nil
		}
		ids = append(ids, s.ID)
	}
	if len(systems) == 0 {
		return nil, errors.New("the BMC serves no ComputerSystem")
	}
	if want == "" {
		return nil, backends.WithHint(fmt.Errorf("the BMC serves several systems (%s)", strings.Join(ids, ", ")),
			"the operator sets system to the Id of this bench's machine")
	}
	return nil, fmt.Errorf("the BMC serves no system %q (it has %s): %w", want, strings.Join(ids, ", "), backends.ErrNotFound)
}
