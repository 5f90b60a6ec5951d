// Package store is poligon's persistent state under the config's state_dir:
// one SQLite file (poligon.db) that several poligon processes on one machine
// (a `poligon serve` and any number of `poligon run`s) share safely. It holds
// the leases of physical benches and, later, stands.
//
// # Concurrency
//
// The file is in WAL mode, so readers never wait for the writer. Every
// read-modify-write runs in one BEGIN IMMEDIATE transaction (see write): the
// write lock is taken before the first read, so two processes can never both
// see a bench free and both take it, and no transaction has to be upgraded
// from reader to writer (the case SQLite answers with an immediate
// SQLITE_BUSY that no busy timeout covers). Between processes SQLite's file
// locks serialise the writers and a busy timeout makes a loser wait instead
// of failing; inside one process a semaphore serialises them first, so the
// goroutines of one server queue in Go instead of polling SQLite's lock.
//
// # Schema
//
// The schema is versioned by PRAGMA user_version: migrations[i] takes the
// file from version i to i+1, applied at Open in one transaction with the
// version bump, so two processes opening an old file at once migrate it
// exactly once. Migrations are append-only: a new table (stands) is a new
// entry at the end, never an edit of a shipped one. A file written by a newer
// poligon (user_version beyond what this one knows) is refused, not guessed at.
// A new kind of state (stands) adds its migration and its methods in a file
// of this package, with every read-modify-write inside (*Store).write.
//
// # The SQLite module: modernc.org/sqlite
//
// Two cgo-free SQLite modules build here. Both were measured with one program
// (a fresh process: open, WAL, create the lease table, then a lease-shaped
// BEGIN IMMEDIATE read-modify-write plus a read, 300 times), 10 runs each,
// interleaved; SQLite 3.54.1 in both, Go 1.26.8, 2 shared cores, ext4:
//
//	                           modernc.org/sqlite v1.62.0   github.com/ncruces/go-sqlite3 v0.37.0
//	binary (hello is 2.4 MB)   10.1 MB (6.6 MB stripped)    13.4 MB (7.7 MB stripped)
//	open + first query         2.3-3.5 ms, median 3.0       2.8-3.8 ms, median 3.3
//	write tx + read, p50       0.26-0.37 ms, median 0.30    0.25-0.35 ms, median 0.28
//	cold build                 25 s                         22 s
//	modules added              9 (libc, mathutil, ...)      3
//
// Speed is a tie. modernc.org/sqlite is the choice because what this package
// exists for, several processes sharing one file, rests on file locking and
// the WAL shared-memory index, and modernc runs SQLite's own unix VFS
// (os_unix.c, transpiled) for both: the code SQLite's test suite exercises.
// go-sqlite3 replaces that VFS with a Go reimplementation (OFD locks) whose
// README says it is "not as battle tested as the original". Its one extra
// draw for poligon, sharing the wazero runtime, is gone: v0.37.0 no longer
// runs on wazero (it is SQLite translated to Go by wasm2go), and it came out
// 3.3 MB larger. The cost of modernc is its dependencies, and one rule: it
// needs exactly the modernc.org/libc version its go.mod names, so do not bump
// modernc.org/libc on its own.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// FileName is the store's file inside the state directory.
const FileName = "poligon.db"

// busyTimeout is how long a writer waits for another process's write
// transaction. Ours last well under a millisecond; ten seconds means a
// process stuck inside one, which the error then says.
const busyTimeout = 10 * time.Second

// Store is the open state store. It is safe for concurrent use by many
// goroutines, and several processes may open the same directory at once.
type Store struct {
	db   *sql.DB
	path string
	// wsem serialises this process's write transactions (see the package doc).
	wsem chan struct{}
}

// OpenError is an Open that failed, with a hint for the person who can fix it.
type OpenError struct {
	Path string // the store's file
	Err  error
	Hint string
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("cannot open the state store %s: %v", e.Path, e.Err)
}

func (e *OpenError) Unwrap() error { return e.Err }

// Open opens (creating if needed) the store in dir, migrating its schema to
// the current version.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, &OpenError{Path: FileName, Err: errors.New("no state directory configured"),
			Hint: "set state_dir in the config (or POLIGON_STATE)"}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, &OpenError{Path: filepath.Join(dir, FileName), Err: err}
	}
	path := filepath.Join(dir, FileName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &OpenError{Path: path, Err: err,
			Hint: "state_dir must be a directory poligon can create and write: " + dir}
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, &OpenError{Path: path, Err: err}
	}
	// One writer at a time anyway; a few more connections let reads
	// (stand_status during a build) run beside it.
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	s := &Store{db: db, path: path, wsem: make(chan struct{}, 1)}
	if err := s.init(context.Background()); err != nil {
		db.Close()
		return nil, openError(path, err)
	}
	return s, nil
}

// dsn is the driver's name for path: a file: URI (so a '?' or '#' in the
// directory stays part of the path) plus the per-connection settings.
func dsn(path string) string {
	u := url.URL{Scheme: "file", OmitHost: true, Path: path}
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	q.Set("_txlock", "immediate") // every BeginTx is BEGIN IMMEDIATE
	// FULL: a lease or a finished step survives a power cut too; our writes
	// are rare, so the fsync per commit costs nothing that matters.
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	q.Set("_error_rc", "1") // no stale message from another call in open errors
	return u.String() + "?" + q.Encode()
}

// init switches the file to WAL and migrates it.
func (s *Store) init(ctx context.Context) error {
	if err := s.writable(ctx); err != nil {
		return err
	}
	// SQLite answers a journal-mode change with SQLITE_BUSY at once, without
	// its busy handler, while another process is opening the same new file;
	// so this one step polls, as the busy handler would.
	var mode string
	err := retryBusy(ctx, func() error {
		// Not in a transaction: SQLite cannot change the journal mode inside one.
		return s.db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
	})
	if err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("the file system does not support SQLite's WAL mode (journal mode is %q)", mode)
	}
	return s.write(ctx, func(tx *sql.Tx) error { return migrate(ctx, tx, migrations) })
}

// retryBusy runs fn until it returns anything but SQLITE_BUSY, for up to
// busyTimeout, backing off from 1 ms to 50 ms between tries.
func retryBusy(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(busyTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := fn()
		if !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

var errReadOnly = errors.New("the file is read-only")

// writable refuses a file SQLite could only open read-only: it falls back to
// that silently, and the first lease would fail instead of the Open.
func (s *Store) writable(ctx context.Context) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		ro, ok := dc.(interface{ IsReadOnly(string) (bool, error) })
		if !ok {
			return nil
		}
		r, err := ro.IsReadOnly("main")
		if err == nil && r {
			err = errReadOnly
		}
		return err
	})
}

// openError adds the hint that fits what SQLite said.
func openError(path string, err error) error {
	e := &OpenError{Path: path, Err: err}
	var se *sqlite.Error
	var ve *VersionError
	switch {
	case errors.As(err, &ve):
		e.Hint = "this file was written by a newer poligon: run that one, or point state_dir elsewhere"
	case errors.Is(err, errReadOnly):
		e.Hint = "poligon must be able to write " + path + ": check its owner, mode and attributes (lsattr)"
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
			e.Hint = "the file is damaged or not poligon's: move it aside and poligon starts a new, empty store (leases and stands in it are lost)"
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_IOERR:
			e.Hint = "poligon must be able to create and write " + FileName + " and its -wal and -shm files in " + filepath.Dir(path)
		case sqlite3.SQLITE_BUSY:
			e.Hint = "another poligon process has held the store's write lock for " + busyTimeout.String() + "; check for a hung poligon"
		}
	}
	return e
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the store. The last process to close it folds the WAL back
// into the file.
func (s *Store) Close() error { return s.db.Close() }

// write runs fn in one BEGIN IMMEDIATE transaction, committed if fn returns
// nil. Every read-modify-write of the store goes through here.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	select {
	case s.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.wsem }()
	if testHookWrite != nil {
		testHookWrite()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.busy(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return s.busy(tx.Commit())
}

// testHookWrite, when set by a test, runs when a write has its turn in this
// process and is about to ask SQLite for the write lock.
var testHookWrite func()

// busy names the likely cause of a write-lock timeout; other errors pass.
func (s *Store) busy(err error) error {
	if isBusy(err) {
		return fmt.Errorf("the state store %s stayed locked by another poligon process for %s: %w", s.path, busyTimeout, err)
	}
	return err
}
