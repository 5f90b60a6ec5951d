package pikvm

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/poligon/poligon/backends"
)

// atxState is GET /api/atx.
type atxState struct {
	Enabled bool `json:"enabled"`
	Busy    bool `json:"busy"`
	LEDs    struct {
		Power bool `json:"power"`
	} `json:"leds"`
}

func (b *Bench) atx(ctx context.Context) (atxState, error) {
	var st atxState
	err := b.call(ctx, "ATX state", "GET", "/atx", nil, nil, &st)
	return st, err
}

// PowerState reads the power LED: "on" or "off"; "unknown" when the PiKVM
// has no ATX board (a PiKVM without the LED wired always reads "off").
func (b *Bench) PowerState(ctx context.Context) (string, error) {
	st, err := b.atx(ctx)
	if err != nil {
		return "unknown", err
	}
	switch {
	case !st.Enabled:
		return "unknown", nil
	case st.LEDs.Power:
		return "on", nil
	}
	return "off", nil
}

// atxActions maps the Power* actions onto kvmd's /atx/power actions.
var atxActions = map[string]string{
	backends.PowerOn:      "on",
	backends.PowerOff:     "off",
	backends.PowerOffHard: "off_hard",
	backends.PowerReset:   "reset_hard",
}

// cycleOffWait bounds how long "cycle" waits for the LED to go off after
// the long press.
const cycleOffWait = 20 * time.Second

// Power performs a Power* action through kvmd's ATX: each waits for its
// button press to finish (wait=1, so a failure is reported, not logged on
// the PiKVM); kvmd presses only when the LED says it is needed (on when
// off, the others when on). A press in progress elsewhere is ErrBusy.
// "cycle" is a long press (off_hard), a wait for the LED to go off, and on.
func (b *Bench) Power(ctx context.Context, action string) error {
	if action == backends.PowerCycle {
		if err := b.atxPower(ctx, "off_hard"); err != nil {
			return err
		}
		if err := b.waitLED(ctx, false, cycleOffWait); err != nil {
			return err
		}
		return b.atxPower(ctx, "on")
	}
	a, ok := atxActions[action]
	if !ok {
		return fmt.Errorf("pikvm: power action %q: want %s, %s, %s, %s or %s", action,
			backends.PowerOn, backends.PowerOff, backends.PowerOffHard, backends.PowerReset, backends.PowerCycle)
	}
	return b.atxPower(ctx, a)
}

func (b *Bench) atxPower(ctx context.Context, action string) error {
	st, err := b.atx(ctx)
	if err != nil {
		return err
	}
	if !st.Enabled {
		return backends.WithHint(fmt.Errorf("pikvm: power %s: this PiKVM has no ATX control: %w", action, backends.ErrUnsupported),
			"the PiKVM's ATX board is not wired or ATX is disabled in kvmd: power cannot be switched from here")
	}
	return b.call(ctx, "power "+action, "POST", "/atx/power", url.Values{"action": {action}, "wait": {"1"}}, nil, nil)
}

// waitLED polls the power LED until it reads on (or off) or limit passes.
func (b *Bench) waitLED(parent context.Context, on bool, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	for {
		st, err := b.atx(ctx)
		if err == nil && st.LEDs.Power == on {
			return nil
		}
		if parent.Err() != nil {
			return fmt.Errorf("pikvm: waiting for the power LED: %w", parent.Err())
		}
		if ctx.Err() != nil {
			want := "off"
			if on {
				want = "on"
			}
			return backends.WithHint(fmt.Errorf("pikvm: the power LED did not go %s within %v", want, limit),
				"the machine did not react to the power button as expected: look at its screen (ui_screenshot); if its LED is not wired to the PiKVM, the state cannot be read")
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			continue // the check above reports it
		}
	}
}
