package bmc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/bmc/redfishtest"
	"github.com/poligon/poligon/backends/qmp"
)

// The power tests run as one sequence on the shared VM, in an order that
// needs few boots (a boot is ~8 s under TCG): each step says what it needs.
func TestPower(t *testing.T) {
	machine(t)

	// A hard reset reboots the guest: QEMU resets it, and the agent
	// answers again from a guest that has been up only since.
	t.Run("reset reboots", func(t *testing.T) {
		ensureOn(t)
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC})
		b := benchFor(t, fake, DialectMegaRAC)
		since := time.Now()
		if err := b.Power(ctxT(t), backends.PowerReset); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, "RESET", since)
		ensureAgent(t)
		var up float64
		if _, err := fmt.Sscan(guest(t, "cat /proc/uptime"), &up); err != nil {
			t.Fatal(err)
		}
		if limit := time.Since(since).Seconds() + 1; up > limit {
			t.Fatalf("the guest has been up %.1f s, longer than since the reset", up)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"ForceRestart"}) {
			t.Errorf("reset types sent: %v, want [ForceRestart]", got)
		}
	})

	// Trap 2: bmclib v2.3.5 reports "soft" as failed after the BMC
	// accepted it (and would try it again); the bench reports success,
	// once, and the guest really shuts down through ACPI.
	t.Run("graceful off", func(t *testing.T) {
		ensureAgent(t) // acpid must run in the guest
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
		b := benchFor(t, fake, DialectDell, func(c *Config) { c.PinSHA256, c.CAFile = "", fake.CAFile })
		ctx := ctxT(t)
		since := time.Now()
		if err := b.Power(ctx, backends.PowerOff); err != nil {
			t.Fatalf("graceful off: %v", err)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"GracefulShutdown"}) {
			t.Errorf("reset types sent: %v, want one GracefulShutdown", got)
		}
		waitEvent(t, "SHUTDOWN", since) // the guest powered itself off
		if st, err := b.PowerState(ctx); err != nil || st != "off" {
			t.Fatalf("PowerState = %q, %v; want off", st, err)
		}
		// Graceful or hard, off is off already.
		for _, a := range []string{backends.PowerOff, backends.PowerOffHard} {
			if err := b.Power(ctx, a); err != nil {
				t.Fatalf("%s of an off machine: %v", a, err)
			}
		}
		// A reset needs a running machine: refused by the bench itself.
		err := b.Power(ctx, backends.PowerReset)
		if !errors.Is(err, backends.ErrNotRunning) || backends.HintOf(err) == "" {
			t.Fatalf("reset when off: %v, want ErrNotRunning with a hint", err)
		}
		if err := b.Power(ctx, backends.PowerOn); err != nil {
			t.Fatal(err)
		}
		if st := vmStatus(t); st != "running" {
			t.Fatalf("after on QEMU is %s", st)
		}
		if st, err := b.PowerState(ctx); err != nil || st != "on" {
			t.Fatalf("PowerState = %q, %v; want on", st, err)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"GracefulShutdown", "On"}) {
			t.Errorf("reset types sent: %v, want [GracefulShutdown On]", got)
		}
	})

	t.Run("off-hard and cycle from off", func(t *testing.T) {
		ensureOn(t)
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
		b := benchFor(t, fake, DialectDell)
		ctx := ctxT(t)
		if err := b.Power(ctx, backends.PowerOffHard); err != nil {
			t.Fatal(err)
		}
		if st := vmStatus(t); st == "running" {
			t.Fatalf("after off-hard QEMU is %s", st)
		}
		if st, err := b.PowerState(ctx); err != nil || st != "off" {
			t.Fatalf("PowerState = %q, %v; want off", st, err)
		}
		if err := b.Power(ctx, backends.PowerCycle); err != nil { // off, so: on
			t.Fatal(err)
		}
		if st := vmStatus(t); st != "running" {
			t.Fatalf("after cycle QEMU is %s", st)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"ForceOff", "On"}) {
			t.Errorf("reset types sent: %v, want [ForceOff On]", got)
		}
		if n := fake.OpenSessions(); n != 0 {
			t.Errorf("%d sessions left open", n)
		}
	})

	// Trap 3: a MegaRAC has no PowerCycle, and bmclib's "reset" would send
	// GracefulShutdown, sleep 9 s and power on. The bench sends ForceOff,
	// waits until the BMC (applying it late) reports Off, and only then On.
	t.Run("cycle without PowerCycle", func(t *testing.T) {
		ensureOn(t)
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC, PowerLag: 1500 * time.Millisecond})
		b := benchFor(t, fake, DialectMegaRAC)
		since := time.Now()
		if err := b.Power(ctxT(t), backends.PowerCycle); err != nil {
			t.Fatal(err)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"ForceOff", "On"}) {
			t.Errorf("reset types sent: %v, want [ForceOff On]", got)
		}
		// The machine was stopped (the late ForceOff), then ran again.
		stop := waitEvent(t, "STOP", since)
		resume := waitEvent(t, "RESUME", stop.Time)
		if resume.Time.Before(stop.Time) {
			t.Errorf("RESUME at %v before STOP at %v", resume.Time, stop.Time)
		}
		if st := vmStatus(t); st != "running" {
			t.Fatalf("after cycle QEMU is %s", st)
		}
	})

	// A BMC answers before it acts (here 2 s later, On included): the
	// bench waits for the state to follow, so a caller reading it right
	// after sees what it asked for, not the old state, and does not retry.
	t.Run("the state follows", func(t *testing.T) {
		ensureOn(t)
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC, PowerLag: 2 * time.Second})
		b := benchFor(t, fake, DialectMegaRAC)
		ctx := ctxT(t)
		for _, step := range []struct{ action, want string }{{backends.PowerOffHard, "off"}, {backends.PowerOn, "on"}} {
			if err := b.Power(ctx, step.action); err != nil {
				t.Fatal(err)
			}
			if st, err := b.PowerState(ctx); err != nil || st != step.want {
				t.Fatalf("right after %s the BMC reads %q (%v), want %s", step.action, st, err, step.want)
			}
		}
		if st := vmStatus(t); st != "running" {
			t.Fatalf("after on QEMU is %s", st)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"ForceOff", "On"}) {
			t.Errorf("reset types sent: %v, want [ForceOff On]", got)
		}
	})

	// A BMC still applying an action refuses the next one (409): ErrBusy
	// with a hint, and the BMC's own words.
	t.Run("busy", func(t *testing.T) {
		ensureOn(t)
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC, PowerLag: time.Second})
		b := benchFor(t, fake, DialectMegaRAC)
		ctx := ctxT(t)
		forceOffElsewhere(t, fake, "Self")       // the bench would wait for it
		err := b.Power(ctx, backends.PowerReset) // the machine still reads On
		if !errors.Is(err, backends.ErrBusy) || backends.HintOf(err) == "" {
			t.Fatalf("reset during a power transition: %v (hint %q), want ErrBusy with a hint", err, backends.HintOf(err))
		}
		if !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "ResourceInUse") {
			t.Errorf("the error does not carry the BMC's answer: %v", err)
		}
		if !strings.Contains(err.Error(), "asked the BMC for ForceRestart") {
			t.Errorf("the error does not say what was asked: %v", err)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"ForceOff", "ForceRestart"}) { // the first from elsewhere
			t.Errorf("reset types sent: %v", got)
		}
		fake.Close() // waits for the lagged ForceOff
		if n := fake.OpenSessions(); n != 0 {
			t.Errorf("%d sessions left open", n)
		}
		ensureOn(t)
	})

	// Supermicro publishes "GracefulShutdownGracefulRestart": gofish
	// refuses GracefulShutdown from that list before sending; the bench
	// reads the fused value and posts the action itself.
	t.Run("graceful off with fused reset types", func(t *testing.T) {
		ensureAgent(t)
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Supermicro})
		b := benchFor(t, fake, DialectSupermicro)
		ctx := ctxT(t)
		since := time.Now()
		if err := b.Power(ctx, backends.PowerOff); err != nil {
			t.Fatalf("graceful off: %v", err)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"GracefulShutdown"}) {
			t.Errorf("reset types sent: %v, want one GracefulShutdown", got)
		}
		waitEvent(t, "SHUTDOWN", since)
		if err := b.Power(ctx, backends.PowerOn); err != nil {
			t.Fatal(err)
		}
	})

	// The BMC acts on a reset and its answer is lost (a connection reset
	// on the way back): the error says what poligon asked for and that no
	// answer came, in poligon's words, not bmclib's ("gofish: power cycle
	// failed"), and the hint warns that the reset may have happened.
	t.Run("reset whose answer is lost", func(t *testing.T) {
		ensureOn(t)
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC})
		b := benchFor(t, fake, DialectMegaRAC, func(c *Config) {
			c.PinSHA256 = ""
			c.HTTP = &http.Client{Transport: losingResets{rawClient(fake).Transport}}
		})
		err := b.Power(ctxT(t), backends.PowerReset)
		if err == nil {
			t.Fatal("a reset whose answer was lost succeeded")
		}
		for _, want := range []string{"power reset: asked the BMC for ForceRestart", "no answer"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error lacks %q: %v", want, err)
			}
		}
		for _, lib := range []string{"gofish", "provider", "power cycle failed", "failed to set power state"} {
			if strings.Contains(err.Error(), lib) {
				t.Errorf("the error speaks bmclib's words (%q): %v", lib, err)
			}
		}
		if h := backends.HintOf(err); !strings.Contains(h, "status") {
			t.Errorf("hint %q: want it to say to read the state before repeating", h)
		}
		if got := resetTypesSent(fake); !slices.Equal(got, []string{"ForceRestart"}) {
			t.Errorf("reset types sent: %v, want one ForceRestart", got)
		}
		ensureAgent(t)
	})

	t.Run("unknown action", func(t *testing.T) {
		fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
		b := benchFor(t, fake, DialectDell)
		if err := b.Power(ctxT(t), "reboot"); err == nil || backends.HintOf(err) == "" {
			t.Errorf("an unknown action: %v, want an error with a hint", err)
		}
		if len(fake.Requests()) != 0 {
			t.Errorf("an unknown action reached the BMC: %v", fake.Requests())
		}
	})
}

// waitEvent waits for a QMP event of the shared VM at or after since.
func waitEvent(t testing.TB, name string, since time.Time) qmp.Event {
	t.Helper()
	var ev qmp.Event
	testQMP(t, func(ctx context.Context, c *qmp.Client) (err error) {
		ev, err = c.WaitEvent(ctx, name, since)
		return err
	})
	return ev
}

// forceOffElsewhere posts ForceOff to the fake as another client does
// (Basic auth, no session), and leaves it to apply it.
func forceOffElsewhere(t *testing.T, s *redfishtest.Server, system string) {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL+"/redfish/v1/Systems/"+system+"/Actions/ComputerSystem.Reset", strings.NewReader(`{"ResetType":"ForceOff"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(testUser, testPassword)
	req.Header.Set("Content-Type", "application/json")
	res, err := rawClient(s).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("ForceOff from elsewhere: %s", res.Status)
	}
}

// losingResets carries requests to the BMC but loses the answer to a
// ComputerSystem.Reset after the BMC acted on it, as a connection reset on
// the way back does.
type losingResets struct{ base http.RoundTripper }

func (l losingResets) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := l.base.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "/Actions/ComputerSystem.Reset") {
		return res, err
	}
	res.Body.Close()
	return nil, syscall.ECONNRESET
}
