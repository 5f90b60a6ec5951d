package store

import "fmt"

// The stand state machine: where a stand and each of its machines can be,
// and every move between them. UpdateStand refuses any other move, so a
// builder, a restart's sweep and a resume in another process can only write
// a history this table allows.

// StandStatus is where a stand is.
type StandStatus string

const (
	StandRunning     StandStatus = "running"     // a builder works on it
	StandDone        StandStatus = "done"        // every machine built and snapshotted
	StandFailed      StandStatus = "failed"      // a step failed, or it was destroyed while building
	StandInterrupted StandStatus = "interrupted" // its builder went away (a restart); resume continues it
)

// standMoves are the stand moves. A new stand starts running (CreateStand,
// which also replaces a done or failed one of the same name).
var standMoves = map[StandStatus][]StandStatus{
	StandRunning:     {StandDone, StandFailed, StandInterrupted},
	StandFailed:      {StandRunning}, // resume
	StandInterrupted: {StandRunning}, // resume
	StandDone:        {},             // destroy, or a new apply, replaces it
}

// MachineStatus is where one machine of a stand is: waiting its turn, in a
// phase of its build, or ended.
type MachineStatus string

const (
	MachinePending MachineStatus = "pending" // not started (or to be resumed)
	// The phases of a build, in order; each is timed (StandPhase).
	MachineCloning  MachineStatus = "cloning"
	MachineBooting  MachineStatus = "booting"  // start, the guest agent, an address
	MachineWaiting  MachineStatus = "waiting"  // for the machines whose address its steps use
	MachineSteps    MachineStatus = "steps"    // its steps, one run of the compiled module
	MachineSnapshot MachineStatus = "snapshot" // the clean snapshot
	// How it ended.
	MachineDone        MachineStatus = "done"
	MachineFailed      MachineStatus = "failed"      // its own build failed
	MachineStopped     MachineStatus = "stopped"     // another machine failed, or the stand was destroyed
	MachineInterrupted MachineStatus = "interrupted" // its builder went away
)

// Phases are the machine statuses that time a part of its build.
var Phases = []MachineStatus{MachineCloning, MachineBooting, MachineWaiting, MachineSteps, MachineSnapshot}

// ended are the statuses a build that stops early leaves a machine in.
var ended = []MachineStatus{MachineFailed, MachineStopped, MachineInterrupted}

// machineMoves are the machine moves. Any unfinished machine can end
// failed, stopped or interrupted; resume puts those back to pending, and
// a machine resumed mid-way starts again at cloning (its clone is found).
var machineMoves = map[MachineStatus][]MachineStatus{
	MachinePending:     append([]MachineStatus{MachineCloning}, ended...),
	MachineCloning:     append([]MachineStatus{MachineBooting}, ended...),
	MachineBooting:     append([]MachineStatus{MachineWaiting, MachineSteps}, ended...),
	MachineWaiting:     append([]MachineStatus{MachineSteps}, ended...),
	MachineSteps:       append([]MachineStatus{MachineSnapshot}, ended...),
	MachineSnapshot:    append([]MachineStatus{MachineDone}, ended...),
	MachineDone:        {},
	MachineFailed:      {MachinePending, MachineInterrupted},
	MachineStopped:     {MachinePending, MachineInterrupted},
	MachineInterrupted: {MachinePending},
}

// CanBecome reports whether a stand may move from s to next (staying is
// always allowed).
func (s StandStatus) CanBecome(next StandStatus) bool {
	return s == next || contains(standMoves[s], next)
}

// CanBecome reports whether a machine may move from s to next (staying is
// always allowed).
func (s MachineStatus) CanBecome(next MachineStatus) bool {
	return s == next || contains(machineMoves[s], next)
}

// Ended reports whether the machine is done or stopped early.
func (s MachineStatus) Ended() bool { return s == MachineDone || contains(ended, s) }

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// MoveError is a write the state machine refuses: a bug in the writer.
type MoveError struct {
	Stand, What string
	From, To    string
}

func (e *MoveError) Error() string {
	return fmt.Sprintf("stand %s: %s cannot go from %s to %s", e.Stand, e.What, e.From, e.To)
}

// checkMoves refuses an update whose statuses move where the tables do not
// allow.
func checkMoves(before, after Stand) error {
	if !before.Status.CanBecome(after.Status) {
		return &MoveError{Stand: before.Name, What: "the stand", From: string(before.Status), To: string(after.Status)}
	}
	if len(before.Machines) != len(after.Machines) {
		return fmt.Errorf("stand %s: an update changed its machines from %d to %d", before.Name, len(before.Machines), len(after.Machines))
	}
	for i, m := range after.Machines {
		if from := before.Machines[i].Status; !from.CanBecome(m.Status) {
			return &MoveError{Stand: before.Name, What: "machine " + m.Role, From: string(from), To: string(m.Status)}
		}
	}
	return nil
}
