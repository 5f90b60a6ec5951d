package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	rf "github.com/stmcginnis/gofish/redfish"

	"github.com/poligon/poligon/backends"
)

// offWait bounds the wait for Off between the halves of an emulated cycle.
var offWait = 60 * time.Second

// settleWait bounds the wait for the state to follow an action: a BMC
// answers before it acts, and a caller reading the old state would retry.
// A graceful shutdown is the OS's to finish: it may take longer, and the
// caller is then told the state has not followed yet.
var settleWait = 30 * time.Second

// pollEvery is how often the power state is read while waiting for it.
var pollEvery = 250 * time.Millisecond

// PowerState answers "on", "off" or "unknown".
func (b *Bench) PowerState(ctx context.Context) (string, error) {
	state := "unknown"
	err := b.run(ctx, "power status", func(o *op) error {
		s, err := o.client.GetPowerState(o.ctx)
		if err != nil {
			return err
		}
		state = powerWord(s)
		return nil
	})
	if err != nil {
		return "unknown", err
	}
	return state, nil
}

// powerWord maps Redfish's PowerState: a machine powering on or off, or
// paused, still has power.
func powerWord(s string) string {
	switch rf.PowerState(s) {
	case rf.OnPowerState, rf.PoweringOnPowerState, rf.PoweringOffPowerState, rf.PausedPowerState:
		return "on"
	case rf.OffPowerState:
		return "off"
	}
	return "unknown"
}

// Power performs one of the backends.Power* actions.
func (b *Bench) Power(ctx context.Context, action string) error {
	switch action {
	case backends.PowerOn, backends.PowerOff, backends.PowerOffHard, backends.PowerReset, backends.PowerCycle:
	default:
		return backends.WithHint(fmt.Errorf("%s: unknown power action %q", b.Kind(), action),
			"use on, off (graceful), off-hard, reset (hard) or cycle (off, then on)")
	}
	return b.run(ctx, "power "+action, func(o *op) error {
		var err error
		want := "on"
		switch action {
		case backends.PowerOn:
			err = o.set("on")
		case backends.PowerOffHard:
			err, want = o.set("off"), "off"
		case backends.PowerOff:
			err, want = o.softOff(), "off"
		case backends.PowerReset:
			err = o.hardReset()
		default:
			err = o.cycle()
		}
		if err != nil {
			return err
		}
		_, err = o.waitState(want, settleWait)
		return err
	})
}

// waitState polls the power state until it reads want or limit passes,
// and says whether it did.
func (o *op) waitState(want string, limit time.Duration) (bool, error) {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		s, err := o.client.GetPowerState(o.ctx)
		if err != nil {
			return false, err
		}
		if powerWord(s) == want {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-o.ctx.Done():
			return false, o.ctx.Err()
		case <-tick.C:
		}
	}
}

// set runs one of bmclib's power states that v2.3.5 gets right: on (On,
// skipped when on), off (ForceOff, skipped when off) and cycle
// (ForceRestart).
func (o *op) set(state string) error {
	t := map[string]string{"on": "On", "off": "ForceOff", "cycle": "ForceRestart"}[state]
	ok, err := o.client.SetPowerState(o.ctx, state)
	if err != nil {
		return &asked{resetType: t, err: err}
	}
	if !ok {
		return &asked{resetType: t, err: errors.New("the BMC did not confirm it")}
	}
	return nil
}

// softOff asks for an ACPI shutdown. bmclib's client reports "soft" as a
// failure after the BMC accepted it (trap 2); its provider's own answer is
// (false, nil) then, so the provider is asked directly and a nil error is
// the success.
func (o *op) softOff() error {
	sys, err := o.system()
	if err != nil {
		return err
	}
	if sys.PowerState == rf.OffPowerState {
		return nil
	}
	exact, loose := allows(sys, rf.GracefulShutdownResetType)
	switch {
	case exact:
		if _, err := o.prov.PowerSet(o.ctx, "soft"); err != nil {
			return &asked{resetType: string(rf.GracefulShutdownResetType), err: err}
		}
		return nil
	case loose:
		return o.reset(sys, rf.GracefulShutdownResetType)
	}
	return backends.WithHint(fmt.Errorf("the BMC offers no graceful shutdown (its reset types: %s): %w", resetTypes(sys), backends.ErrUnsupported),
		"use off-hard to cut the power")
}

// hardReset restarts a running machine at once.
func (o *op) hardReset() error {
	sys, err := o.system()
	if err != nil {
		return err
	}
	if sys.PowerState == rf.OffPowerState {
		return backends.WithHint(fmt.Errorf("the machine is off, and a reset needs it on: %w", backends.ErrNotRunning),
			"power it on (action on), or use cycle, which powers an off machine on")
	}
	if exact, _ := allows(sys, rf.ForceRestartResetType); exact {
		return o.set("cycle") // bmclib's "cycle" is ForceRestart
	}
	if _, loose := allows(sys, rf.PowerCycleResetType); loose {
		return o.reset(sys, rf.PowerCycleResetType)
	}
	return o.offThenOn()
}

// cycle powers the machine off and on again. Never bmclib's "reset"
// (trap 3): without PowerCycle it sends GracefulShutdown and waits 9 s.
func (o *op) cycle() error {
	sys, err := o.system()
	if err != nil {
		return err
	}
	if sys.PowerState == rf.OffPowerState {
		return o.set("on")
	}
	if _, loose := allows(sys, rf.PowerCycleResetType); loose {
		return o.reset(sys, rf.PowerCycleResetType)
	}
	return o.offThenOn()
}

// offThenOn is a cycle for BMCs without PowerCycle: ForceOff, then On
// once the BMC reports Off, not before (a BMC that applies ForceOff late
// would otherwise take the On first and stay off).
func (o *op) offThenOn() error {
	if err := o.set("off"); err != nil {
		return err
	}
	off, err := o.waitState("off", offWait)
	if err != nil {
		return err
	}
	if !off {
		return fmt.Errorf("the BMC accepted ForceOff but still reports the machine on after %v, so it was not powered on again", offWait)
	}
	return o.set("on")
}

// reset posts a ResetType directly to the system's Reset action (with its
// ETag), for the types gofish would refuse or bmclib mishandles.
func (o *op) reset(sys *rf.ComputerSystem, t rf.ResetType) error {
	var doc struct {
		Actions map[string]struct {
			Target string `json:"target"`
		}
	}
	json.Unmarshal(sys.RawData, &doc)
	target := doc.Actions["#ComputerSystem.Reset"].Target
	if target == "" {
		return fmt.Errorf("the BMC's system %s has no Reset action", sys.ID)
	}
	if err := sys.Post(target, map[string]rf.ResetType{"ResetType": t}); err != nil {
		return &asked{resetType: string(t), err: err}
	}
	return nil
}

// knownResetTypes is the ResetType enumeration, to read fused values.
var knownResetTypes = []string{"On", "ForceOn", "ForceOff", "ForceRestart", "GracefulRestart", "GracefulShutdown",
	"PushPowerButton", "PowerCycle", "Nmi", "Pause", "Resume", "Suspend", "FullPowerCycle"}

// allows says whether the system takes reset type t: exact when it is
// published as such (or nothing is published: gofish then sends anything),
// loose when it is only part of a fused value such as Supermicro's
// "GracefulShutdownGracefulRestart", which gofish would refuse.
func allows(sys *rf.ComputerSystem, t rf.ResetType) (exact, loose bool) {
	if len(sys.SupportedResetTypes) == 0 || slices.Contains(sys.SupportedResetTypes, t) {
		return true, true
	}
	for _, v := range sys.SupportedResetTypes {
		if slices.Contains(splitFused(string(v)), string(t)) {
			return false, true
		}
	}
	return false, false
}

// splitFused splits a value made of known reset type names run together;
// anything else answers nil.
func splitFused(v string) []string {
	var out []string
	for v != "" {
		found := ""
		for _, k := range knownResetTypes {
			if strings.HasPrefix(v, k) && len(k) > len(found) {
				found = k
			}
		}
		if found == "" {
			return nil
		}
		out = append(out, found)
		v = v[len(found):]
	}
	return out
}

func resetTypes(sys *rf.ComputerSystem) string {
	if len(sys.SupportedResetTypes) == 0 {
		return "none published"
	}
	var s []string
	for _, t := range sys.SupportedResetTypes {
		s = append(s, string(t))
	}
	return strings.Join(s, ", ")
}
