package kvmdtest

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// atx is kvmd's GPIO ATX plugin wired to the machine: the power LED is
// whether the VM runs; the power button boots a machine that is off and
// asks a running one to shut down (ACPI); a long press forces it off; the
// reset button resets it. A click holds its button's busy region for the
// press and a settle second after it: another click meanwhile is 409.
type atx struct {
	s *Server

	mu         sync.Mutex
	powerBusy  bool
	resetBusy  bool
	background sync.WaitGroup
}

func (a *atx) led(ctx context.Context) (bool, error) { return a.s.vm.Running(ctx) }

func (a *atx) state(_ http.ResponseWriter, r *http.Request) (any, error) {
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
	}
	on, err := a.led(ctx)
	if err != nil {
		return nil, fail(500, "Exception", "%v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return map[string]any{
		"enabled": true,
		"busy":    a.powerBusy || a.resetBusy,
		"acts":    map[string]bool{"power": a.powerBusy, "reset": a.resetBusy},
		"leds":    map[string]bool{"power": on, "hdd": false},
	}, nil
}

var errAtxBusy = fail(409, "AtxIsBusyError", "Performing another ATX operation, please try again later")

// power is /atx/power: on clicks power only when the LED is off; off,
// off_hard and reset_hard click only when it is on.
func (a *atx) power(_ http.ResponseWriter, r *http.Request) (any, error) {
	v := queryString(r, "action")
	if v == nil {
		return nil, validatorError(nil, "ATX power action")
	}
	action := strings.ToLower(*v)
	wait, err := queryBool(r, "wait", false)
	if err != nil {
		return nil, err
	}
	var button string
	switch action {
	case "on":
		button = "power"
	case "off":
		button = "power"
	case "off_hard":
		button = "power_long"
	case "reset_hard":
		button = "reset"
	default:
		return nil, validatorError(action, "ATX power action")
	}
	on, err := a.led(r.Context())
	if err != nil {
		return nil, fail(500, "Exception", "%v", err)
	}
	if (action == "on") == on {
		return nil, nil // nothing to do: kvmd answers ok without a click
	}
	return nil, a.clickButton(button, wait)
}

func (a *atx) click(_ http.ResponseWriter, r *http.Request) (any, error) {
	v := queryString(r, "button")
	if v == nil {
		return nil, validatorError(nil, "ATX button")
	}
	button := strings.ToLower(*v)
	if button != "power" && button != "power_long" && button != "reset" {
		return nil, validatorError(button, "ATX button")
	}
	wait, err := queryBool(r, "wait", false)
	if err != nil {
		return nil, err
	}
	return nil, a.clickButton(button, wait)
}

// clickButton enters the button's region (409 when busy) and presses it,
// in the background unless wait.
func (a *atx) clickButton(button string, wait bool) error {
	a.mu.Lock()
	busy := &a.powerBusy
	if button == "reset" {
		busy = &a.resetBusy
	}
	if *busy {
		a.mu.Unlock()
		return errAtxBusy
	}
	*busy = true
	a.mu.Unlock()
	run := func() {
		defer func() {
			a.mu.Lock()
			*busy = false
			a.mu.Unlock()
		}()
		a.press(button)
	}
	if wait {
		run()
		return nil
	}
	a.background.Add(1)
	go func() {
		defer a.background.Done()
		run()
	}()
	return nil
}

// press holds the button and lets it go, then settles, as gpio.py does.
// What the machine does is what a PC does with those presses.
func (a *atx) press(button string) {
	o := a.s.opts
	ctx, cancel := context.WithTimeout(context.Background(), o.LongClickDelay+o.ClickSettle+30*time.Second)
	defer cancel()
	vm := a.s.vm
	on, _ := a.led(ctx)
	switch button {
	case "power":
		time.Sleep(o.ClickDelay)
		if on {
			vm.Execute(ctx, "system_powerdown", nil, nil) // the guest shuts down (or ignores it)
		} else {
			a.boot(ctx)
		}
	case "power_long":
		if !on {
			a.boot(ctx) // a press on a machine that is off starts it...
		}
		time.Sleep(o.LongClickDelay)
		if running, _ := a.led(ctx); running { // ...and holding it forces it off
			vm.Execute(ctx, "stop", nil, nil)
			vm.Execute(ctx, "system_reset", nil, nil)
		}
	case "reset":
		time.Sleep(o.ClickDelay)
		if on {
			vm.Execute(ctx, "system_reset", nil, nil)
		}
	}
	a.s.log.Info("kvmdtest: clicked ATX button", "button", button)
	time.Sleep(o.ClickSettle)
}

// boot starts a machine that is off: from the beginning, like power-on.
func (a *atx) boot(ctx context.Context) {
	a.s.vm.Execute(ctx, "system_reset", nil, nil)
	a.s.vm.Execute(ctx, "cont", nil, nil)
}

func (a *atx) wait() { a.background.Wait() }
