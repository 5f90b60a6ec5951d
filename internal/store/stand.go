package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Stand is one stand of an owner on a bench: its plan, the script compiled
// from it, and how far each machine got.
type Stand struct {
	Bench, Owner, Name string
	Status             StandStatus
	Plan               json.RawMessage // the plan as applied
	Script             string          // the compiled module
	Machines           []StandMachine
	Error              string
	// Builder names the process building it ("" once no one is), so another
	// process can tell a stand whose builder died from one being built.
	Builder string
	Req     string // the request id of the stand_apply that started it
	// Cancel asks the builder to stop (stand_destroy with force), seen by
	// a builder in any process.
	Cancel                  bool
	Created, Updated, Ended time.Time // Ended is zero while running
}

// StandMachine is one machine's progress.
type StandMachine struct {
	Role     string        `json:"role"`
	Template string        `json:"template"`
	Needs    []string      `json:"needs,omitempty"`
	VMID     int           `json:"vmid,omitempty"`
	Node     string        `json:"node,omitempty"`
	IP       string        `json:"ip,omitempty"`
	Status   MachineStatus `json:"status"`
	Steps    []StandStep   `json:"steps"`
	Started  time.Time     `json:"started,omitzero"`
	Ended    time.Time     `json:"ended,omitzero"`
	Error    string        `json:"error,omitempty"`
	Phases   []StandPhase  `json:"phases,omitempty"`
	// Transcript is the last run of its steps (the compiled module's).
	Transcript string `json:"transcript,omitempty"`
}

// StandStep is one step of a machine: started and ended (or failed).
type StandStep struct {
	N       int       `json:"n"`
	Label   string    `json:"label"`
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// StandPhase is a timed part of a machine's build (clone, boot, steps,
// snapshot): what the benchmarks and the status view read.
type StandPhase struct {
	Name    MachineStatus `json:"name"`
	Started time.Time     `json:"started"`
	Ended   time.Time     `json:"ended,omitzero"`
}

// StandsBusyError refuses a new build: the owner has max building already.
type StandsBusyError struct {
	Building []string
	Max      int
}

func (e *StandsBusyError) Error() string {
	return fmt.Sprintf("%d stands are building already (%v), at most %d at a time", len(e.Building), e.Building, e.Max)
}

// StandExistsError refuses a stand whose name is taken by one the store
// still knows.
type StandExistsError struct {
	Name   string
	Status StandStatus
}

func (e *StandExistsError) Error() string {
	return fmt.Sprintf("stand %s exists (status %s)", e.Name, e.Status)
}

// ErrNoStand is a stand the store does not know.
var ErrNoStand = errors.New("no such stand")

// CreateStand records a new stand as running. It refuses, in one
// transaction, a name the owner already has on the bench (except a stand
// that is done or failed, which the new one replaces) and a build beyond
// maxBuilding running ones; so of two processes racing, the limit holds.
func (s *Store) CreateStand(ctx context.Context, st Stand, maxBuilding int, now time.Time) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		old, ok, err := standOf(ctx, tx, st.Bench, st.Owner, st.Name)
		if err != nil {
			return err
		}
		if ok && (old.Status == StandRunning || old.Status == StandInterrupted) {
			return &StandExistsError{Name: st.Name, Status: old.Status}
		}
		rows, err := tx.QueryContext(ctx, `SELECT name FROM stand WHERE bench = ? AND owner = ? AND status = ? ORDER BY name`,
			st.Bench, st.Owner, StandRunning)
		if err != nil {
			return err
		}
		var building []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return err
			}
			building = append(building, n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if maxBuilding > 0 && len(building) >= maxBuilding {
			return &StandsBusyError{Building: building, Max: maxBuilding}
		}
		st.Status, st.Created, st.Updated, st.Ended, st.Cancel = StandRunning, now, now, time.Time{}, false
		return putStand(ctx, tx, st)
	})
}

// UpdateStand changes a stand in one transaction: fn sees the stored stand
// and edits it in place; returning an error changes nothing.
func (s *Store) UpdateStand(ctx context.Context, bench, owner, name string, now time.Time, fn func(*Stand) error) (Stand, error) {
	var out Stand
	err := s.write(ctx, func(tx *sql.Tx) error {
		st, ok, err := standOf(ctx, tx, bench, owner, name)
		if err != nil {
			return err
		}
		if !ok {
			return ErrNoStand
		}
		before := st
		before.Machines = append([]StandMachine(nil), st.Machines...)
		if err := fn(&st); err != nil {
			return err
		}
		if err := checkMoves(before, st); err != nil {
			return err
		}
		st.Updated = now
		out = st
		return putStand(ctx, tx, st)
	})
	return out, err
}

// StandOf reads one stand.
func (s *Store) StandOf(ctx context.Context, bench, owner, name string) (Stand, bool, error) {
	return standOf(ctx, s.db, bench, owner, name)
}

// Stands lists an owner's stands on a bench, by name.
func (s *Store) Stands(ctx context.Context, bench, owner string) ([]Stand, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+standColumns+` FROM stand WHERE bench = ? AND owner = ? ORDER BY name`, bench, owner)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Stand
	for rows.Next() {
		st, err := scanStand(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// DeleteStand forgets a stand (its VMs are the caller's business).
func (s *Store) DeleteStand(ctx context.Context, bench, owner, name string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM stand WHERE bench = ? AND owner = ? AND name = ?`, bench, owner, name)
		return err
	})
}

// ForgetStands deletes the stands that stopped (done, failed, interrupted)
// before cutoff, and answers how many.
func (s *Store) ForgetStands(ctx context.Context, cutoff time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM stand WHERE status != ? AND updated_ns < ?`, StandRunning, cutoff.UnixNano())
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	return int(n), err
}

const standColumns = `bench, owner, name, status, plan, script, machines, error, builder, req, cancel, created_ns, updated_ns, ended_ns`

func standOf(ctx context.Context, q querier, bench, owner, name string) (Stand, bool, error) {
	st, err := scanStand(q.QueryRowContext(ctx, `SELECT `+standColumns+` FROM stand WHERE bench = ? AND owner = ? AND name = ?`, bench, owner, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Stand{}, false, nil
	}
	return st, err == nil, err
}

func scanStand(r interface{ Scan(...any) error }) (Stand, error) {
	var st Stand
	var plan, machines string
	var cancel int
	var created, updated, ended int64
	if err := r.Scan(&st.Bench, &st.Owner, &st.Name, &st.Status, &plan, &st.Script, &machines, &st.Error,
		&st.Builder, &st.Req, &cancel, &created, &updated, &ended); err != nil {
		return Stand{}, err
	}
	st.Plan = json.RawMessage(plan)
	if err := json.Unmarshal([]byte(machines), &st.Machines); err != nil {
		return Stand{}, fmt.Errorf("stand %s: its machines do not decode: %w", st.Name, err)
	}
	st.Cancel = cancel != 0
	st.Created, st.Updated = fromNanos(created), fromNanos(updated)
	if ended != 0 {
		st.Ended = fromNanos(ended)
	}
	return st, nil
}

func putStand(ctx context.Context, tx *sql.Tx, st Stand) error {
	machines, err := json.Marshal(st.Machines)
	if err != nil {
		return err
	}
	if st.Machines == nil {
		machines = []byte("[]")
	}
	var ended int64
	if !st.Ended.IsZero() {
		ended = st.Ended.UnixNano()
	}
	cancel := 0
	if st.Cancel {
		cancel = 1
	}
	_, err = tx.ExecContext(ctx, `INSERT OR REPLACE INTO stand (`+standColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		st.Bench, st.Owner, st.Name, st.Status, string(st.Plan), st.Script, string(machines), st.Error,
		st.Builder, st.Req, cancel, st.Created.UnixNano(), st.Updated.UnixNano(), ended)
	return err
}
