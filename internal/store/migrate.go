package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations[i] takes the schema from user_version i to i+1. Append only:
// a shipped entry is never edited, since files already carry its result.
// Times are UTC unix nanoseconds (INTEGER), never text.
var migrations = []string{
	// 1: leases of physical benches. A row whose until_ns has passed is a
	// free bench; such rows are deleted by the next write that sees them.
	`CREATE TABLE lease (
		bench    TEXT PRIMARY KEY,
		holder   TEXT NOT NULL,
		since_ns INTEGER NOT NULL,
		until_ns INTEGER NOT NULL
	) STRICT`,
	// 2: stands. One row per stand of an owner on a bench; its machines and
	// their steps are one JSON document (machines), rewritten whole by each
	// progress update inside one write transaction.
	`CREATE TABLE stand (
		bench      TEXT NOT NULL,
		owner      TEXT NOT NULL,
		name       TEXT NOT NULL,
		status     TEXT NOT NULL,
		plan       TEXT NOT NULL,
		script     TEXT NOT NULL,
		machines   TEXT NOT NULL,
		error      TEXT NOT NULL,
		builder    TEXT NOT NULL,
		req        TEXT NOT NULL,
		cancel     INTEGER NOT NULL,
		created_ns INTEGER NOT NULL,
		updated_ns INTEGER NOT NULL,
		ended_ns   INTEGER NOT NULL,
		PRIMARY KEY (bench, owner, name)
	) STRICT`,
	// 3: trace steps: every call on a machine, whoever made it. Frames are
	// PNG files under state_dir/trace, named by digest; a step names its
	// frames before and after. bytes is the row's own share of the bound.
	`CREATE TABLE trace_step (
		id       INTEGER PRIMARY KEY,
		at_ns    INTEGER NOT NULL,
		took_ns  INTEGER NOT NULL,
		owner    TEXT NOT NULL,
		caller   TEXT NOT NULL,
		bench    TEXT NOT NULL,
		vmid     INTEGER NOT NULL,
		vm       TEXT NOT NULL,
		stand    TEXT NOT NULL,
		session  TEXT NOT NULL,
		req      TEXT NOT NULL,
		source   TEXT NOT NULL,
		call     TEXT NOT NULL,
		args     TEXT NOT NULL,
		outcome  TEXT NOT NULL,
		error    TEXT NOT NULL,
		before   TEXT NOT NULL,
		after    TEXT NOT NULL,
		text     TEXT NOT NULL,
		elements TEXT NOT NULL,
		bytes    INTEGER NOT NULL
	) STRICT;
	CREATE INDEX trace_vm ON trace_step (bench, vmid, id);
	CREATE INDEX trace_owner ON trace_step (owner, id);
	CREATE INDEX trace_session ON trace_step (session, id);
	CREATE INDEX trace_before ON trace_step (before);
	CREATE INDEX trace_after ON trace_step (after);
	CREATE TABLE trace_frame (
		digest TEXT PRIMARY KEY,
		bytes  INTEGER NOT NULL,
		at_ns  INTEGER NOT NULL
	) STRICT`,
}

// SchemaVersion is the user_version this poligon writes.
func SchemaVersion() int { return len(migrations) }

// VersionError is a store whose schema is newer than this poligon knows.
type VersionError struct {
	Have, Know int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("its schema is version %d, this poligon knows versions up to %d", e.Have, e.Know)
}

// migrate applies the migrations the file lacks, inside tx, so the schema
// and its version change together or not at all.
func migrate(ctx context.Context, tx *sql.Tx, ms []string) error {
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	if v > len(ms) {
		return &VersionError{Have: v, Know: len(ms)}
	}
	for i := v; i < len(ms); i++ {
		if _, err := tx.ExecContext(ctx, ms[i]); err != nil {
			return fmt.Errorf("schema migration %d: %w", i+1, err)
		}
	}
	if v == len(ms) {
		return nil
	}
	// PRAGMA takes no bound parameters; len(ms) is ours, not input.
	_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(ms)))
	return err
}
