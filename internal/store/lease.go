package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// Lease is one holder's claim on a physical bench, live while now < Until.
type Lease struct {
	Bench  string
	Holder string
	Since  time.Time // when this holder took it; kept across extensions
	Until  time.Time
}

// HeldError is a lease or release refused because another holder's lease on
// the bench is live.
type HeldError struct {
	Bench  string
	Holder string
	Until  time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("bench %s is leased by %s until %s", e.Bench, e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// Lease takes bench for holder until now+d: a free bench or one whose lease
// has expired is taken afresh, the holder's own live lease is extended (or
// shortened) to now+d, and another holder's live lease refuses with a
// *HeldError naming it. The check and the take are one transaction, so of any
// number of processes and goroutines racing for a free bench exactly one wins.
// The caller sets the upper bound of d; the store only requires d > 0.
// holder is shown to other callers (HeldError, Leases), so it is never a
// secret: for a bench key, pass a name for the key, not the key.
func (s *Store) Lease(ctx context.Context, bench, holder string, d time.Duration, now time.Time) (Lease, error) {
	if bench == "" || holder == "" {
		return Lease{}, errors.New("a lease needs a bench and a holder")
	}
	if d <= 0 {
		return Lease{}, fmt.Errorf("a lease must last longer than 0 (got %s)", d)
	}
	n := now.UnixNano()
	if n > math.MaxInt64-int64(d) {
		return Lease{}, fmt.Errorf("a lease of %s from %s ends past the year 2262", d, now.UTC().Format(time.RFC3339))
	}
	var got Lease
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := sweep(ctx, tx, n); err != nil {
			return err
		}
		l, ok, err := leaseOf(ctx, tx, bench, n)
		if err != nil {
			return err
		}
		since := n
		if ok {
			if l.Holder != holder {
				return &HeldError{Bench: bench, Holder: l.Holder, Until: l.Until}
			}
			since = l.Since.UnixNano()
		}
		got = Lease{Bench: bench, Holder: holder, Since: fromNanos(since), Until: fromNanos(n + int64(d))}
		_, err = tx.ExecContext(ctx, `INSERT INTO lease (bench, holder, since_ns, until_ns) VALUES (?, ?, ?, ?)
			ON CONFLICT (bench) DO UPDATE SET holder = excluded.holder, since_ns = excluded.since_ns, until_ns = excluded.until_ns`,
			bench, holder, since, n+int64(d))
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	return got, nil
}

// Release ends holder's lease on bench. Releasing a bench that is free (never
// leased, released already, or expired) succeeds; releasing another holder's
// live lease refuses with a *HeldError naming it.
func (s *Store) Release(ctx context.Context, bench, holder string, now time.Time) error {
	n := now.UnixNano()
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := sweep(ctx, tx, n); err != nil {
			return err
		}
		l, ok, err := leaseOf(ctx, tx, bench, n)
		if err != nil || !ok {
			return err
		}
		if l.Holder != holder {
			return &HeldError{Bench: bench, Holder: l.Holder, Until: l.Until}
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM lease WHERE bench = ?`, bench)
		return err
	})
}

// Leases answers the live leases by bench. It only reads, so it never waits
// for a writer.
func (s *Store) Leases(ctx context.Context, now time.Time) (map[string]Lease, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT bench, holder, since_ns, until_ns FROM lease WHERE until_ns > ?`, now.UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]Lease{}
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, err
		}
		m[l.Bench] = l
	}
	return m, rows.Err()
}

// LeaseOf answers bench's live lease; ok is false for a free bench.
func (s *Store) LeaseOf(ctx context.Context, bench string, now time.Time) (l Lease, ok bool, err error) {
	return leaseOf(ctx, s.db, bench, now.UnixNano())
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func leaseOf(ctx context.Context, q querier, bench string, n int64) (Lease, bool, error) {
	l, err := scanLease(q.QueryRowContext(ctx,
		`SELECT bench, holder, since_ns, until_ns FROM lease WHERE bench = ? AND until_ns > ?`, bench, n))
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, err
	}
	return l, true, nil
}

// sweep deletes the leases that expired by n: the opportunistic clean-up that
// keeps the table as small as the number of benches in use.
func sweep(ctx context.Context, tx *sql.Tx, n int64) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM lease WHERE until_ns <= ?`, n)
	return err
}

func scanLease(r interface{ Scan(...any) error }) (Lease, error) {
	var l Lease
	var since, until int64
	if err := r.Scan(&l.Bench, &l.Holder, &since, &until); err != nil {
		return Lease{}, err
	}
	l.Since, l.Until = fromNanos(since), fromNanos(until)
	return l, nil
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }
