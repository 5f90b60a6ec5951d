package store

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestStandLifecycle(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	now := time.Unix(1_800_000_000, 0).UTC()
	st := Stand{Bench: "local", Owner: "ann", Name: "web", Plan: json.RawMessage(`{"name":"web"}`), Script: "// js",
		Machines: []StandMachine{{Role: "server", Template: "tiny", Status: "pending"}}, Builder: "1:2:x", Req: "r1"}
	if err := s.CreateStand(ctx, st, 2, now); err != nil {
		t.Fatal(err)
	}
	var exists *StandExistsError
	if err := s.CreateStand(ctx, st, 2, now); !errors.As(err, &exists) || exists.Status != StandRunning {
		t.Fatalf("the same name twice while running: %v", err)
	}
	got, err := s.UpdateStand(ctx, "local", "ann", "web", now.Add(time.Second), func(st *Stand) error {
		st.Machines[0].VMID = 101
		st.Machines[0].Steps = append(st.Machines[0].Steps, StandStep{N: 1, Label: "exec", Started: now})
		return nil
	})
	if err != nil || got.Machines[0].VMID != 101 {
		t.Fatalf("update = %+v, %v", got, err)
	}
	// A failing fn changes nothing.
	if _, err := s.UpdateStand(ctx, "local", "ann", "web", now, func(st *Stand) error {
		st.Status = StandDone
		return errors.New("no")
	}); err == nil {
		t.Fatal("a failing update should fail")
	}
	back, ok, err := s.StandOf(ctx, "local", "ann", "web")
	if err != nil || !ok || back.Status != StandRunning || back.Machines[0].Steps[0].Label != "exec" || !back.Updated.Equal(now.Add(time.Second)) {
		t.Fatalf("read back = %+v, %v, %v", back, ok, err)
	}
	if _, err := s.UpdateStand(ctx, "local", "ann", "nope", now, func(*Stand) error { return nil }); !errors.Is(err, ErrNoStand) {
		t.Fatalf("unknown stand: %v", err)
	}
	// Another owner's list does not show it.
	if l, _ := s.Stands(ctx, "local", "bob"); len(l) != 0 {
		t.Fatalf("bob sees %v", l)
	}
	// A finished stand is replaced by a new apply of the same name, and
	// forgotten after the cutoff.
	s.UpdateStand(ctx, "local", "ann", "web", now, func(st *Stand) error { st.Status = StandDone; st.Ended = now; return nil })
	if err := s.CreateStand(ctx, st, 2, now.Add(time.Minute)); err != nil {
		t.Fatalf("replace a done stand: %v", err)
	}
	s.UpdateStand(ctx, "local", "ann", "web", now, func(st *Stand) error { st.Status = StandFailed; return nil })
	if n, err := s.ForgetStands(ctx, now.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("forget = %d, %v", n, err)
	}
	if l, _ := s.Stands(ctx, "local", "ann"); len(l) != 0 {
		t.Fatalf("left: %v", l)
	}
}

// Of racing creators beyond the limit, exactly max win.
func TestStandBuildingLimitUnderRace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b := open(t, dir), open(t, dir)
	now := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			errs[i] = s.CreateStand(ctx, Stand{Bench: "local", Owner: "ann", Name: string(rune('a' + i))}, 2, now)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		var busy *StandsBusyError
		switch {
		case err == nil:
			won++
		case errors.As(err, &busy):
		default:
			t.Fatal(err)
		}
	}
	if won != 2 {
		t.Fatalf("%d stands started, want 2", won)
	}
}
