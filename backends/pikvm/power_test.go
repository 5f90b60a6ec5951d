package pikvm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
)

// ATX power drives the machine for real: off asks the guest to shut down
// (ACPI) and the LED follows; on boots it; a press while another is in
// progress is refused as busy and changes nothing; cycle is a long press
// and on; reset resets it.
func TestPower(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	b := newBench(t, srv, nil)
	s := screenOf(t, b)
	ctx := testContext(t)
	state := func() string {
		t.Helper()
		st, err := b.PowerState(ctx)
		if err != nil {
			t.Fatal(seen(err))
		}
		return st
	}
	if st := state(); st != "on" {
		t.Fatalf("power state %q, want on", st)
	}

	// off: ACPI; tiny's acpid powers the machine off in a few seconds.
	if err := b.Power(ctx, backends.PowerOff); err != nil {
		t.Fatal(seen(err))
	}
	if err := eventually(ctx, func() bool { return state() == "off" }); err != nil {
		t.Fatal("the LED stayed on after power off")
	}
	if running, _ := vm.Running(ctx); running {
		t.Fatal("the VM still runs with the LED off")
	}
	if _, _, err := s.Frame(ctx); !errors.Is(err, backends.ErrNoSignal) {
		t.Errorf("the screen of a machine that is off answered %v, want no signal", seen(err))
	}
	// off again: kvmd presses nothing when the LED is already off.
	if err := b.Power(ctx, backends.PowerOff); err != nil {
		t.Fatal(seen(err))
	}

	// on: boots it.
	if err := b.Power(ctx, backends.PowerOn); err != nil {
		t.Fatal(seen(err))
	}
	if st := state(); st != "on" {
		t.Fatalf("power state %q after on", st)
	}
	waitReady(t, vm, agent)
	mustGuest(t, agent, "echo before >/tmp/marker")

	// cycle (a long press, the LED off, on), and a second press during
	// the long one: refused as busy, nothing changed by it.
	done := make(chan error, 1)
	go func() { done <- b.Power(ctx, backends.PowerCycle) }()
	if err := eventually(ctx, func() bool {
		st, err := b.atx(ctx)
		return err == nil && st.Busy
	}); err != nil {
		t.Fatal("the long press never showed as busy")
	}
	err := b.Power(ctx, backends.PowerOff)
	text := seen(err)
	var ae *APIError
	if !errors.Is(err, backends.ErrBusy) || !errors.As(err, &ae) || ae.Status != 409 || ae.Class != "AtxIsBusyError" || backends.HintOf(err) == "" {
		t.Fatalf("a press during a press answered %v, want 409 AtxIsBusyError (ErrBusy) with a hint", text)
	}
	if !strings.Contains(text, "Performing another ATX operation") {
		t.Errorf("the busy error does not carry kvmd's message: %s", text)
	}
	if err := <-done; err != nil {
		t.Fatal(seen(err))
	}
	if st := state(); st != "on" {
		t.Fatalf("power state %q after cycle", st)
	}

	// reset, while the cycled machine boots: QEMU resets it.
	since := time.Now()
	if err := b.Power(ctx, backends.PowerReset); err != nil {
		t.Fatal(seen(err))
	}
	q, err := vm.QMP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.WaitEvent(ctx, "RESET", since); err != nil {
		t.Fatalf("no RESET after power reset: %v", err)
	}
	waitReady(t, vm, agent)
	if out, err := guest(ctx, agent, "cat /tmp/marker"); err == nil {
		t.Fatalf("the machine was not restarted: /tmp/marker still reads %q", out)
	}
	if _, _, err := s.Frame(ctx); err != nil {
		t.Fatal(seen(err))
	}

	if err := b.Power(ctx, "explode"); err == nil || !strings.Contains(err.Error(), "explode") {
		t.Errorf("an unknown action answered %v", err)
	}
}
