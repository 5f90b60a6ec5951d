package hostapi_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/store"
)

// machine is a physical bench for hostapi's rules: backendtest serves the
// console (vmid 1), and it records what reaches its power and media.
type machine struct {
	*backendtest.Backend
	m hostapi.Machine

	mu      sync.Mutex
	actions []string
}

func (b *machine) Machine() hostapi.Machine { return b.m }
func (b *machine) PowerState(ctx context.Context) (string, error) {
	return "on", nil
}
func (b *machine) Power(ctx context.Context, action string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.actions = append(b.actions, "power "+action)
	return nil
}
func (b *machine) MediaList(ctx context.Context) ([]backends.MediaImage, backends.MediaState, error) {
	return []backends.MediaImage{{Name: "debian.iso", Size: 1 << 20}}, backends.MediaState{}, nil
}
func (b *machine) MediaMount(ctx context.Context, m backends.MediaMount) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.actions = append(b.actions, "mount "+m.Image)
	return nil
}
func (b *machine) MediaEject(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.actions = append(b.actions, "eject")
	return nil
}
func (b *machine) done() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.actions...)
}

// physicalBench makes bench "kvm1" with policy m for two callers, alice
// and bob, sharing one lease store.
func physicalBench(t *testing.T, m hostapi.Machine) (*machine, *hostapi.Caller, *hostapi.Caller, context.Context) {
	t.Helper()
	be := backendtest.New("pikvm")
	be.AddVM(backends.VM{VMID: 1, Name: "kvm1", Status: "running"})
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env := &hostapi.Env{Locks: hostapi.NewLocks(""), MaxWait: maxWait, BusyWait: busyWait, Leases: app.Leases(st)}
	m.Bench = "kvm1"
	b := &machine{Backend: be, m: m}
	ctx, cancel := context.WithTimeout(context.Background(), backendtest.HangGuard)
	t.Cleanup(cancel)
	return b, plain(t, ctx, env, b, "alice", "bench:kvm1"), plain(t, ctx, env, b, "bob", "bench:kvm1"), ctx
}

func TestRentalBenchNeedsYourLease(t *testing.T) {
	_, alice, bob, ctx := physicalBench(t, hostapi.Machine{Rental: true, Allow: map[string]bool{"hid": true}})
	if _, _, err := alice.LockVM(ctx, 1); err == nil || !strings.Contains(err.Error(), "hold no lease") {
		t.Fatalf("no lease: %v", err)
	}
	l, err := alice.Lease(ctx, 30*time.Minute)
	if err != nil || l.Holder != "alice" {
		t.Fatalf("Lease = %+v, %v", l, err)
	}
	v, release, err := alice.LockVM(ctx, 1)
	if err != nil {
		t.Fatalf("with her lease: %v", err)
	}
	if err := v.Type(ctx, "ls"); err != nil {
		t.Errorf("typing on her leased bench: %v", err)
	}
	release()
	// Bob: refused everywhere, each time naming the holder.
	if _, _, err := bob.LockVM(ctx, 1); err == nil || !strings.Contains(err.Error(), "alice holds it until") {
		t.Errorf("bob on alice's bench: %v", err)
	}
	if _, err := bob.Lease(ctx, time.Minute); err == nil || !strings.Contains(err.Error(), "leased by alice until") {
		t.Errorf("bob's lease: %v", err)
	}
	if err := bob.Release(ctx); err == nil || !strings.Contains(err.Error(), "leased by alice") {
		t.Errorf("bob's release: %v", err)
	}
	// Extending her own; the bounds; releasing frees it for bob.
	if l2, err := alice.Lease(ctx, time.Hour); err != nil || !l2.Until.After(l.Until) {
		t.Errorf("extend: %+v, %v", l2, err)
	}
	for _, d := range []time.Duration{0, 481 * time.Minute} {
		if _, err := alice.Lease(ctx, d); err == nil || hostapi.HintOf(err) == "" {
			t.Errorf("a lease of %s: %v", d, err)
		}
	}
	if err := alice.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Lease(ctx, time.Minute); err != nil {
		t.Errorf("bob after the release: %v", err)
	}
	if _, _, err := bob.LockVM(ctx, 2); err == nil || !strings.Contains(err.Error(), "one physical machine") {
		t.Errorf("vmid 2: %v", err)
	}
}

func TestGates(t *testing.T) {
	t.Run("allow", func(t *testing.T) {
		b, alice, _, ctx := physicalBench(t, hostapi.Machine{Allow: map[string]bool{"hid": true}})
		v, _ := lock(t, ctx, alice, 1)
		err := v.Power(ctx, "reset", hostapi.Consent{Confirm: true})
		if err == nil || !strings.Contains(err.Error(), "does not allow power actions") || strings.Contains(hostapi.HintOf(err), "allow") {
			t.Errorf("power on a hid-only bench: %v (hint %q)", err, hostapi.HintOf(err))
		}
		// Ctrl+Alt+Del is power, whatever tool sends it; typing is HID.
		if err := v.Press(ctx, "ctrl-alt-delete"); err == nil || !strings.Contains(err.Error(), "power actions") {
			t.Errorf("ctrl-alt-delete: %v", err)
		}
		if err := v.Press(ctx, "alt-sysrq-b"); err == nil {
			t.Errorf("sysrq went through")
		}
		if err := v.MediaEject(ctx, hostapi.Consent{}); err == nil {
			t.Errorf("media on a hid-only bench went through")
		}
		if err := v.Press(ctx, "ret"); err != nil {
			t.Errorf("a plain key: %v", err)
		}
		if got := b.done(); len(got) != 0 || b.Count("Key") != 1 {
			t.Errorf("refused actions reached the bench: %q, %d keys", got, b.Count("Key"))
		}
	})
	t.Run("confirm", func(t *testing.T) {
		b, alice, _, ctx := physicalBench(t, hostapi.Machine{Allow: map[string]bool{"hid": true, "power": true}, Approval: "confirm"})
		v, _ := lock(t, ctx, alice, 1)
		if err := v.Power(ctx, "off", hostapi.Consent{}); err == nil || !strings.Contains(err.Error(), "needs confirmation") {
			t.Errorf("unconfirmed: %v", err)
		}
		if err := v.Power(ctx, "off", hostapi.Consent{Confirm: true}); err != nil {
			t.Errorf("confirmed: %v", err)
		}
		// A key cannot carry the confirmation.
		if err := v.Press(ctx, "ctrl-alt-delete"); err == nil || !strings.Contains(hostapi.HintOf(err), "bench_power") {
			t.Errorf("ctrl-alt-delete on a confirming bench: %v", err)
		}
		if got := b.done(); strings.Join(got, ",") != "power off" {
			t.Errorf("reached the bench: %q", got)
		}
	})
	t.Run("ask", func(t *testing.T) {
		b, alice, _, ctx := physicalBench(t, hostapi.Machine{Allow: map[string]bool{"media": true}, Approval: "ask"})
		v, _ := lock(t, ctx, alice, 1)
		var ask *hostapi.ConsentNeeded
		if err := v.MediaMount(ctx, backends.MediaMount{Image: "debian.iso"}, hostapi.Consent{CanAsk: true}); !errors.As(err, &ask) || !strings.Contains(ask.Question, "kvm1") {
			t.Errorf("a client that can ask: %v", err)
		}
		if err := v.MediaMount(ctx, backends.MediaMount{Image: "debian.iso"}, hostapi.Consent{}); err == nil || !strings.Contains(err.Error(), "needs confirmation") {
			t.Errorf("a client that cannot ask, unconfirmed: %v", err)
		}
		if err := v.MediaMount(ctx, backends.MediaMount{Image: "debian.iso"}, hostapi.Consent{CanAsk: true, Asked: true}); err != nil {
			t.Errorf("approved by the human: %v", err)
		}
		if err := v.MediaEject(ctx, hostapi.Consent{Confirm: true}); err != nil {
			t.Errorf("a client that cannot ask, confirmed: %v", err)
		}
		if got := b.done(); strings.Join(got, ",") != "mount debian.iso,eject" {
			t.Errorf("reached the bench: %q", got)
		}
	})
	t.Run("dry run", func(t *testing.T) {
		b, alice, _, ctx := physicalBench(t, hostapi.Machine{Allow: map[string]bool{"hid": true, "power": true, "media": true}, DryRun: true})
		v, _ := lock(t, ctx, alice, 1)
		var dry *hostapi.DryRun
		for name, err := range map[string]error{
			"power": v.Power(ctx, "cycle", hostapi.Consent{}),
			"media": v.MediaEject(ctx, hostapi.Consent{}),
			"type":  v.Type(ctx, "rm -rf /"),
		} {
			if !errors.As(err, &dry) {
				t.Errorf("%s on a dry-run bench: %v", name, err)
			}
		}
		if got := b.done(); len(got) != 0 || b.Count("Type") != 0 {
			t.Errorf("a dry run reached the bench: %q, %d typed", got, b.Count("Type"))
		}
		// Reading is no action.
		if st, err := v.PowerState(ctx); err != nil || st != "on" {
			t.Errorf("power state: %q, %v", st, err)
		}
	})
}
