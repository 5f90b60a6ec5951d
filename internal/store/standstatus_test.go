package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The stand state machine as a table: every pair of statuses, allowed or
// not. A new status or move changes this table on purpose.
func TestStandMoves(t *testing.T) {
	all := []StandStatus{StandRunning, StandDone, StandFailed, StandInterrupted}
	allowed := map[[2]StandStatus]bool{
		{StandRunning, StandDone}: true, {StandRunning, StandFailed}: true, {StandRunning, StandInterrupted}: true,
		{StandFailed, StandRunning}: true, {StandInterrupted, StandRunning}: true,
	}
	for _, from := range all {
		for _, to := range all {
			want := from == to || allowed[[2]StandStatus{from, to}]
			if got := from.CanBecome(to); got != want {
				t.Errorf("stand %s -> %s: %v, want %v", from, to, got, want)
			}
		}
	}
}

func TestMachineMoves(t *testing.T) {
	all := []MachineStatus{MachinePending, MachineCloning, MachineBooting, MachineWaiting, MachineSteps, MachineSnapshot,
		MachineDone, MachineFailed, MachineStopped, MachineInterrupted}
	forward := map[[2]MachineStatus]bool{
		{MachinePending, MachineCloning}: true, {MachineCloning, MachineBooting}: true,
		{MachineBooting, MachineWaiting}: true, {MachineBooting, MachineSteps}: true, {MachineWaiting, MachineSteps}: true,
		{MachineSteps, MachineSnapshot}: true, {MachineSnapshot, MachineDone}: true,
		// resume
		{MachineFailed, MachinePending}: true, {MachineStopped, MachinePending}: true, {MachineInterrupted, MachinePending}: true,
		// a restart's sweep finds a machine another one stopped
		{MachineFailed, MachineInterrupted}: true, {MachineStopped, MachineInterrupted}: true,
	}
	unfinished := []MachineStatus{MachinePending, MachineCloning, MachineBooting, MachineWaiting, MachineSteps, MachineSnapshot}
	for _, from := range unfinished {
		for _, to := range []MachineStatus{MachineFailed, MachineStopped, MachineInterrupted} {
			forward[[2]MachineStatus{from, to}] = true
		}
	}
	for _, from := range all {
		for _, to := range all {
			want := from == to || forward[[2]MachineStatus{from, to}]
			if got := from.CanBecome(to); got != want {
				t.Errorf("machine %s -> %s: %v, want %v", from, to, got, want)
			}
		}
	}
	for _, s := range all {
		if want := s == MachineDone || s == MachineFailed || s == MachineStopped || s == MachineInterrupted; s.Ended() != want {
			t.Errorf("%s.Ended() = %v", s, !want)
		}
	}
}

// UpdateStand refuses a move the table does not allow and changes nothing.
func TestUpdateStandRefusesABadMove(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	now := time.Unix(1_800_000_000, 0).UTC()
	st := Stand{Bench: "local", Owner: "ann", Name: "web", Machines: []StandMachine{{Role: "db", Status: MachinePending}}}
	if err := s.CreateStand(ctx, st, 2, now); err != nil {
		t.Fatal(err)
	}
	var move *MoveError
	if _, err := s.UpdateStand(ctx, "local", "ann", "web", now, func(st *Stand) error {
		st.Machines[0].Status = MachineDone // pending straight to done: no build does that
		return nil
	}); !errors.As(err, &move) || move.From != "pending" || move.To != "done" {
		t.Fatalf("pending -> done: %v", err)
	}
	if _, err := s.UpdateStand(ctx, "local", "ann", "web", now, func(st *Stand) error {
		st.Status = StandDone
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateStand(ctx, "local", "ann", "web", now, func(st *Stand) error {
		st.Status = StandRunning // a done stand is rebuilt by a new apply, never resumed
		return nil
	}); !errors.As(err, &move) {
		t.Fatalf("done -> running: %v", err)
	}
	back, _, _ := s.StandOf(ctx, "local", "ann", "web")
	if back.Status != StandDone || back.Machines[0].Status != MachinePending {
		t.Fatalf("a refused update changed the stand: %+v", back)
	}
}

// A builder is present while it holds its presence, in this process or
// another, and gone once it lets go or its process ends.
func TestPresence(t *testing.T) {
	s := open(t, t.TempDir())
	if s.Present("builder-1-a") {
		t.Fatal("present before it was held")
	}
	release, err := s.Hold("builder-1-a")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Present("builder-1-a") {
		t.Fatal("not present while held")
	}
	if _, err := s.Hold("builder-1-a"); err == nil {
		t.Fatal("held twice")
	}
	release()
	if s.Present("builder-1-a") {
		t.Fatal("present after release")
	}
	if _, err := s.Hold("../x"); err == nil {
		t.Fatal("a path as an id")
	}
	if s.Present("1:2:old") {
		t.Fatal("an old builder id (pid:start:instance) reads as present")
	}
}
