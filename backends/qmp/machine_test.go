package qmp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/backendtest"
)

// QEMU sends STOP before the reply to stop and RESUME before the reply to
// cont: Execute skips them and WaitEvent finds them afterwards.
func TestStopContAndTheirEvents(t *testing.T) {
	c := startQEMU(t).dial(t)
	ctx := testContext(t)
	since := time.Now()

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.QueryStatus(ctx); err != nil || st.Status != "paused" || st.Running {
		t.Fatalf("after stop: %+v, %v", st, err)
	}
	if err := c.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.QueryStatus(ctx); err != nil || st.Status != "running" {
		t.Fatalf("after cont: %+v, %v", st, err)
	}

	stop, err := c.WaitEvent(ctx, "STOP", since)
	if err != nil {
		t.Fatal(err)
	}
	resume, err := c.WaitEvent(ctx, "RESUME", since)
	if err != nil {
		t.Fatal(err)
	}
	if resume.Time.Before(stop.Time) || stop.Time.Before(since.Truncate(time.Microsecond)) {
		t.Fatalf("event times out of order: since %v, STOP %v, RESUME %v", since, stop.Time, resume.Time)
	}
	// Nothing stopped the VM after the resume.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.WaitEvent(short, "STOP", resume.Time.Add(time.Microsecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a STOP that never comes: got %v", err)
	}
}

// WaitEvent also waits for events that have not come yet.
func TestResetAndPowerdownEvents(t *testing.T) {
	c := startQEMU(t).dial(t)
	ctx := testContext(t)
	since := time.Now()

	got := make(chan error, 1)
	go func() {
		ev, err := c.WaitEvent(ctx, "RESET", since)
		if err == nil && len(ev.Data) == 0 {
			err = errors.New("RESET without data")
		}
		got <- err
	}()
	// The reset goes out only once the waiter has searched the kept events
	// and blocks: the RESET can only reach it as a new event.
	backendtest.WaitParked(t, "qmp.(*Client).WaitEvent", func() bool { return len(got) > 0 })
	if err := c.SystemReset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	if err := c.SystemPowerdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitEvent(ctx, "POWERDOWN", since); err != nil {
		t.Fatal(err)
	}
}
