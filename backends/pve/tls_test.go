package pve

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
	"github.com/poligon/poligon/internal/testvm"
)

func secretOf(token string) string { return token[strings.LastIndex(token, "=")+1:] }

// everyCall runs one call of each kind and answers their errors.
func everyCall(t *testing.T, b *Backend, vmid int) map[string]error {
	t.Helper()
	ctx := testContext(t, 20*time.Second)
	errs := map[string]error{}
	_, _, errs["Identity"] = b.Identity(ctx)
	_, errs["Templates"] = b.Templates(ctx)
	_, errs["VMs"] = b.VMs(ctx)
	_, errs["VM"] = b.VM(ctx, vmid)
	_, _, errs["Clone"] = b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-tls", Pool: "alice"})
	_, errs["Start"] = b.Start(ctx, vmid)
	_, errs["TaskStatus"] = b.TaskStatus(ctx, "UPID:pve1:00001234:00005678:65000000:qmstart:100:alice@pve!repro:")
	_, errs["ISOs"] = b.ISOs(ctx, "")
	errs["GuestPing"] = b.GuestPing(testContext(t, time.Second), vmid)
	_, errs["Console"] = b.Console(testContext(t, 5*time.Second), vmid)
	return errs
}

func TestWrongCAFailsEveryCallClearly(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	c.srv.AddVM(pvetest.VM{VMID: 150, Name: "alice-repro-a", Pool: "alice", Running: true})
	// Answers cached through a trusted connection are not served to a
	// Backend that trusts other roots.
	if _, err := c.backend(t, c.alice).VMs(testContext(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	foreign := pvetest.WriteForeignCA(t)
	b := c.backend(t, c.alice, func(cfg *Config) { cfg.CAFile = foreign })
	for call, err := range everyCall(t, b, 150) {
		if err == nil {
			t.Errorf("%s succeeded against an untrusted certificate", call)
			continue
		}
		msg := err.Error()
		for _, want := range []string{"TLS certificate", "not trusted", "certificate signed by unknown authority", foreign} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not say %q", call, msg, want)
			}
		}
		if strings.Contains(msg, secretOf(c.alice)) {
			t.Errorf("%s: the error shows the token secret: %q", call, msg)
		}
	}
}

func TestTrustFromTheEnvironment(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	ctx := testContext(t, 10*time.Second)

	t.Setenv("SSL_CERT_FILE", c.srv.CAFile)
	if _, _, err := c.backend(t, c.alice, func(cfg *Config) { cfg.CAFile = "" }).Identity(ctx); err != nil {
		t.Fatalf("with SSL_CERT_FILE naming the cluster CA: %v", err)
	}

	// ISOs is never cached, so each call below reaches the server.
	t.Setenv("SSL_CERT_FILE", pvetest.WriteForeignCA(t))
	_, err := c.backend(t, c.alice, func(cfg *Config) { cfg.CAFile = "" }).ISOs(ctx, "")
	if err == nil || !strings.Contains(err.Error(), "SSL_CERT_FILE=") || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("with SSL_CERT_FILE naming another CA: %v", err)
	}

	t.Setenv("SSL_CERT_FILE", "")
	t.Setenv("SSL_CERT_DIR", "")
	_, err = c.backend(t, c.alice, func(cfg *Config) { cfg.CAFile = "" }).ISOs(ctx, "")
	if err == nil || !strings.Contains(err.Error(), "system trust store") {
		t.Fatalf("with the system store only: %v", err)
	}
}

func TestTheSecretNeverAppearsInErrorsOrLogs(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	c.srv.AddVM(pvetest.VM{VMID: 150, Name: "alice-repro-a", Pool: "alice", Running: true})
	c.srv.AddVM(pvetest.VM{VMID: 160, Name: "someone-else"})
	var logs testvm.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	withLog := func(cfg *Config) { cfg.Logger = logger }

	var all []string
	collect := func(errs map[string]error) {
		for call, err := range errs {
			if err != nil {
				all = append(all, call+": "+err.Error())
			}
		}
	}
	b := c.backend(t, c.alice, withLog)
	collect(everyCall(t, b, 150)) // successes and PVE's refusals (the agent, the console)
	collect(everyCall(t, b, 160)) // 403s on someone else's VM
	c.srv.InjectFault(pvetest.Fault{Path: "/", Status: 500, Message: "internal error for " + c.alice})
	b.cl.invalidate()
	collect(everyCall(t, b, 150)) // a server that echoes the token back
	c.srv.RemoveFaults()
	wrong := c.backend(t, aliceTokenID+"=11111111-2222-3333-4444-555555555555", withLog)
	collect(everyCall(t, wrong, 150))

	if len(all) < 20 {
		t.Fatalf("only %d errors collected: %v", len(all), all)
	}
	for _, secret := range []string{secretOf(c.alice), "11111111-2222-3333-4444-555555555555"} {
		for _, e := range all {
			if strings.Contains(e, secret) {
				t.Errorf("an error shows a secret: %s", e)
			}
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows a secret:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), aliceTokenID) {
		t.Errorf("the log does not name the token id (its safe part):\n%s", logs.String())
	}
}
