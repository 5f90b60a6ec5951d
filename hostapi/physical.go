package hostapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
)

// Physical benches: a PiKVM or a BMC in front of one real machine. The
// bench is the machine (vmid 1); who may use it is decided by leases, not
// by names, and what may be done to it by the operator's gates, checked
// here with every other rule: an effect is classified by what it does
// (Ctrl+Alt+Del through ui_key is power, not typing), and a refusal
// changes nothing.

// MachineVMID is the vmid of the machine a physical bench is.
const MachineVMID = 1

// Machine is what the operator set for a physical bench.
type Machine struct {
	Bench    string
	Type     string // pikvm | bmc
	Rental   bool   // tools need the caller's lease
	Allow    map[string]bool
	DryRun   bool
	Approval string // "", "confirm", "ask"
}

// Physical is served by the backend of a physical bench (the composition
// root wraps the controller's client in one).
type Physical interface {
	Machine() Machine
}

// Effects an action can have on a machine.
const (
	EffectHID   = "hid"
	EffectPower = "power"
	EffectMedia = "media"
)

// machine answers the bench's policy, or false on a hypervisor bench.
func (c *Caller) machine() (Machine, bool) {
	p, ok := c.be.(Physical)
	if !ok {
		return Machine{}, false
	}
	return p.Machine(), true
}

// Machine answers the bench's policy when the caller's bench is a physical
// machine.
func (c *Caller) Machine() (Machine, bool) { return c.machine() }

// holder is who holds a lease: the caller's owner, or the bench key's
// principal when the call came with the key alone.
func (c *Caller) holder() string { return c.owner }

// readMachine checks a caller may use the machine: vmid 1, and on a rental
// bench their live lease.
func (c *Caller) readMachine(ctx context.Context, vmid int, m Machine) (backends.VM, error) {
	if vmid != MachineVMID {
		return backends.VM{}, Failf(fmt.Sprintf("use vmid %d: on a physical bench it names the machine", MachineVMID),
			"bench %s is one physical machine, not vmid %d", m.Bench, vmid)
	}
	if m.Rental {
		l, err := c.lease(ctx)
		if err != nil {
			return backends.VM{}, err
		}
		if l == nil || l.Holder != c.holder() {
			who := "nobody holds it"
			if l != nil {
				who = fmt.Sprintf("%s holds it until %s", l.Holder, l.Until.UTC().Format(time.RFC3339))
			}
			return backends.VM{}, Failf("lease it first with bench_lease (bench_status shows who holds what)",
				"bench %s is a rental and you hold no lease on it (%s)", m.Bench, who)
		}
	}
	lc, err := c.lifecycle()
	if err != nil {
		return backends.VM{}, err
	}
	return lc.VM(ctx, vmid)
}

// Leases keep the leases of physical benches where every poligon process
// on the machine sees them (the app serves them from its state store).
type Leases interface {
	// Lease takes bench for holder until now+d, or extends the holder's own
	// lease; another holder's live lease refuses with a *LeaseHeld.
	Lease(ctx context.Context, bench, holder string, d time.Duration, now time.Time) (Lease, error)
	// Release ends holder's lease; another holder's refuses with a
	// *LeaseHeld.
	Release(ctx context.Context, bench, holder string, now time.Time) error
	// LeaseOf answers the bench's live lease, ok false when it is free.
	LeaseOf(ctx context.Context, bench string, now time.Time) (l Lease, ok bool, err error)
}

// Lease is one holder's claim on a physical bench, live while now < Until.
type Lease struct {
	Bench  string
	Holder string
	Since  time.Time // when this holder took it; kept across extensions
	Until  time.Time
}

// LeaseHeld refuses a lease or a release: another holder's lease is live.
type LeaseHeld struct {
	Holder string
	Until  time.Time
}

func (e *LeaseHeld) Error() string {
	return fmt.Sprintf("leased by %s until %s", e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// lease answers the bench's live lease, nil when free.
func (c *Caller) lease(ctx context.Context) (*Lease, error) {
	m, _ := c.machine()
	if c.env.Leases == nil {
		return nil, Failf("set state_dir in the config: leases live there", "bench %s cannot keep leases: this server has no state store", m.Bench)
	}
	l, ok, err := c.env.Leases.LeaseOf(ctx, m.Bench, time.Now())
	if err != nil {
		return nil, wrap(err, "", "bench %s lease", m.Bench)
	}
	if !ok {
		return nil, nil
	}
	return &l, nil
}

// BenchLease answers the live lease of a physical bench, nil when free.
func (c *Caller) BenchLease(ctx context.Context) (*Lease, error) { return c.lease(ctx) }

// MaxLease bounds a lease (the manual's 480 minutes).
const MaxLease = 480 * time.Minute

// Lease takes or extends the caller's lease of a physical bench.
func (c *Caller) Lease(ctx context.Context, d time.Duration) (Lease, error) {
	m, ok := c.machine()
	if !ok {
		return Lease{}, Failf("leases are for physical benches: bench_status lists them", "this bench is not a physical machine")
	}
	if d <= 0 || d > MaxLease {
		return Lease{}, Failf("minutes is 1 to 480", "a lease of %s is out of range", d)
	}
	if c.env.Leases == nil {
		return Lease{}, Failf("set state_dir in the config: leases live there", "bench %s cannot keep leases: this server has no state store", m.Bench)
	}
	l, err := c.env.Leases.Lease(ctx, m.Bench, c.holder(), d, time.Now())
	var held *LeaseHeld
	if errors.As(err, &held) {
		return Lease{}, Failf("pick a free bench (bench_status), or wait for it",
			"bench %s is leased by %s until %s", m.Bench, held.Holder, held.Until.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return Lease{}, wrap(err, "", "bench %s lease", m.Bench)
	}
	return l, nil
}

// Release ends the caller's lease early.
func (c *Caller) Release(ctx context.Context) error {
	m, ok := c.machine()
	if !ok {
		return Failf("leases are for physical benches: bench_status lists them", "this bench is not a physical machine")
	}
	if c.env.Leases == nil {
		return Failf("set state_dir in the config: leases live there", "bench %s cannot keep leases: this server has no state store", m.Bench)
	}
	err := c.env.Leases.Release(ctx, m.Bench, c.holder(), time.Now())
	var held *LeaseHeld
	if errors.As(err, &held) {
		return Failf("only the holder releases a lease", "bench %s is leased by %s, not you", m.Bench, held.Holder)
	}
	return wrap(err, "", "bench %s release", m.Bench)
}

// Consent is what the caller brought for an action the operator wants
// approved: confirm=true, a human's yes asked through the client
// (elicitation), and whether the client can ask at all.
type Consent struct {
	Confirm bool
	Asked   bool
	CanAsk  bool
}

// ConsentNeeded asks the engine to ask the human (elicitation) and call
// again with Consent.Asked.
type ConsentNeeded struct{ Question string }

func (e *ConsentNeeded) Error() string { return "needs a human's approval: " + e.Question }

// DryRun is the answer of an action a dry-run bench logged and skipped.
type DryRun struct{ What string }

func (e *DryRun) Error() string { return "dry run: " + e.What + " was not done" }

// gate checks that the bench's operator allows effect, with the consent
// the bench asks for; what names the action in the answer. On a
// hypervisor bench every effect is allowed.
func (v *VM) gate(effect, what string, consent Consent) error {
	m, ok := v.c.machine()
	if !ok {
		return nil
	}
	if !m.Allow[effect] {
		// Which setting would lift it is the operator's business.
		return Failf("ask the bench's operator", "bench %s does not allow %s actions (%s)", m.Bench, effect, what)
	}
	if effect != EffectHID { // typing is not asked about, key by key
		switch {
		case consent.Asked:
		case m.Approval == "confirm" && !consent.Confirm,
			m.Approval == "ask" && !consent.CanAsk && !consent.Confirm:
			return Failf("call again with confirm=true if you mean it", "%s on bench %s needs confirmation", what, m.Bench)
		case m.Approval == "ask" && consent.CanAsk:
			return &ConsentNeeded{Question: fmt.Sprintf("Allow %s on the physical machine %s?", what, m.Bench)}
		}
	}
	if m.DryRun {
		return &DryRun{What: what}
	}
	return nil
}

// keyEffect classifies a key combination: the ones that reboot or halt a
// machine are power, not typing.
func keyEffect(combo string) string {
	k := strings.ToLower(combo)
	if strings.Contains(k, "sysrq") || (strings.Contains(k, "ctrl") && strings.Contains(k, "alt") &&
		(strings.HasSuffix(k, "-delete") || strings.HasSuffix(k, "-del") || strings.HasSuffix(k, "-backspace"))) {
		return EffectPower
	}
	return EffectHID
}

// PowerState answers the machine's power: "on", "off" or "unknown".
func (v *VM) PowerState(ctx context.Context) (string, error) {
	p, err := backends.As[backends.Power](v.c.be, "power")
	if err != nil {
		return "", err
	}
	s, err := p.PowerState(ctx)
	return s, wrap(err, "", "bench power state")
}

// Power performs a power action on the machine.
func (v *VM) Power(ctx context.Context, action string, consent Consent) error {
	switch action {
	case backends.PowerOn, backends.PowerOff, backends.PowerOffHard, backends.PowerReset, backends.PowerCycle:
	default:
		return Failf("action is on, off, off-hard, reset, cycle or status", "unknown power action %q", action)
	}
	p, err := backends.As[backends.Power](v.c.be, "power")
	if err != nil {
		return err
	}
	if err := v.gate(EffectPower, "power "+action, consent); err != nil {
		return err
	}
	err = p.Power(ctx, action)
	if errors.Is(err, backends.ErrBusy) {
		return &Error{Message: "the controller is busy with another power action: " + err.Error(), Hint: "wait a few seconds and call again", Err: err}
	}
	return wrap(err, "", "power %s", action)
}

// Media lists the images the bench's virtual drive can present, and what
// it presents now.
func (v *VM) Media(ctx context.Context) ([]backends.MediaImage, backends.MediaState, error) {
	m, err := backends.As[backends.VirtualMedia](v.c.be, "virtual media")
	if err != nil {
		return nil, backends.MediaState{}, err
	}
	imgs, st, err := m.MediaList(ctx)
	return imgs, st, wrap(err, "", "virtual media")
}

// MediaMount presents an image to the machine.
func (v *VM) MediaMount(ctx context.Context, mount backends.MediaMount, consent Consent) error {
	if mount.Mode == "" {
		mount.Mode = "cd"
	}
	if mount.Mode != "cd" && mount.Mode != "flash" {
		return Failf("mode is cd or flash", "unknown media mode %q", mount.Mode)
	}
	if (mount.Image == "") == (mount.URL == "") {
		return Failf("name an image from bench_media list, or a storage and path", "give one image to mount")
	}
	m, err := backends.As[backends.VirtualMedia](v.c.be, "virtual media")
	if err != nil {
		return err
	}
	what := "media mount " + mount.Image
	if mount.URL != "" {
		what = "media mount from a storage"
	}
	if err := v.gate(EffectMedia, what, consent); err != nil {
		return err
	}
	return wrap(m.MediaMount(ctx, mount), "", "virtual media mount")
}

// MediaEject disconnects the virtual drive.
func (v *VM) MediaEject(ctx context.Context, consent Consent) error {
	m, err := backends.As[backends.VirtualMedia](v.c.be, "virtual media")
	if err != nil {
		return err
	}
	if err := v.gate(EffectMedia, "media eject", consent); err != nil {
		return err
	}
	return wrap(m.MediaEject(ctx), "", "virtual media eject")
}
