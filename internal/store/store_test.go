package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/latency"
)

func userVersion(t *testing.T, s *Store) int {
	t.Helper()
	var v int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpenSettings(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir?with#odd chars", "state") // created by Open
	s := open(t, dir)
	if s.Path() != filepath.Join(dir, FileName) {
		t.Fatalf("path %s", s.Path())
	}
	if _, err := os.Stat(s.Path()); err != nil {
		t.Fatal(err)
	}
	var mode string
	var busy, fk, sync int
	row := s.db.QueryRow("SELECT * FROM pragma_journal_mode, pragma_busy_timeout, pragma_foreign_keys, pragma_synchronous")
	if err := row.Scan(&mode, &busy, &fk, &sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || busy != int(busyTimeout.Milliseconds()) || fk != 1 || sync != 2 {
		t.Fatalf("journal_mode=%s busy_timeout=%d foreign_keys=%d synchronous=%d", mode, busy, fk, sync)
	}
	if v := userVersion(t, s); v != SchemaVersion() {
		t.Fatalf("user_version %d, want %d", v, SchemaVersion())
	}
}

func TestMigrateFromEmptyFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir)
	if v := userVersion(t, s); v != SchemaVersion() {
		t.Fatalf("user_version %d, want %d", v, SchemaVersion())
	}
	if _, err := s.Lease(context.Background(), "rack1", "alice", time.Minute, t0); err != nil {
		t.Fatal(err)
	}
}

// A later migration (a dataset table) applies to a file of the current
// version once, and only it: the lease written before survives.
func TestMigrateUpgrade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(ctx, "rack1", "alice", time.Hour, t0); err != nil {
		t.Fatal(err)
	}
	s.Close()

	old := migrations
	t.Cleanup(func() { migrations = old })
	migrations = append(append([]string(nil), old...), `CREATE TABLE later (name TEXT PRIMARY KEY) STRICT`)
	for range 2 { // the second open finds nothing to do
		s = open(t, dir)
		if v := userVersion(t, s); v != len(old)+1 {
			t.Fatalf("user_version %d, want %d", v, len(old)+1)
		}
		if _, err := s.db.Exec(`INSERT OR REPLACE INTO later VALUES ('web')`); err != nil {
			t.Fatal(err)
		}
		if l, ok, err := s.LeaseOf(ctx, "rack1", t0); err != nil || !ok || l.Holder != "alice" {
			t.Fatalf("lease after migration: %+v %v %v", l, ok, err)
		}
		s.Close()
	}

	// A failing migration leaves the file as it was.
	migrations = append(append([]string(nil), old...), `CREATE TABLE lease (x)`) // exists: fails
	os.Remove(filepath.Join(dir, FileName))
	os.Remove(filepath.Join(dir, FileName+"-wal"))
	os.Remove(filepath.Join(dir, FileName+"-shm"))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("schema migration %d", len(old)+1)) {
		t.Fatalf("a failing migration opened: %v", err)
	}
	migrations = old
	s = open(t, dir)
	if v := userVersion(t, s); v != len(old) {
		t.Fatalf("user_version %d after a failed migration, want %d", v, len(old))
	}
}

func TestOpenNewerSchema(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(dir)
	var oe *OpenError
	var ve *VersionError
	if !errors.As(err, &oe) || !errors.As(err, &ve) || ve.Have != 99 || oe.Hint == "" {
		t.Fatalf("opening a newer schema: %v", err)
	}
	t.Log(err, "; hint: ", oe.Hint)
}

// openFails checks that Open fails naming the path, with a hint.
func openFails(t *testing.T, dir, want string) {
	t.Helper()
	_, err := Open(dir)
	var oe *OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("Open(%s) = %v, want an *OpenError", dir, err)
	}
	if !strings.Contains(err.Error(), oe.Path) || !strings.Contains(err.Error(), want) || oe.Hint == "" {
		t.Fatalf("Open(%s) = %q (hint %q), want the path, %q and a hint", dir, err, oe.Hint, want)
	}
	t.Logf("%v; hint: %s", err, oe.Hint)
}

func TestOpenCorruptFile(t *testing.T) {
	dir := t.TempDir()
	junk := []byte(strings.Repeat("not an sqlite database\n", 400))
	if err := os.WriteFile(filepath.Join(dir, FileName), junk, 0o600); err != nil {
		t.Fatal(err)
	}
	openFails(t, dir, "not a database")
	if got, _ := os.ReadFile(filepath.Join(dir, FileName)); string(got) != string(junk) {
		t.Fatal("Open changed the file it refused")
	}
}

func TestOpenDirIsAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	openFails(t, f, "not a directory")
	openFails(t, filepath.Join(f, "below"), "not a directory")
	if _, err := Open(""); err == nil {
		t.Fatal("Open of no directory succeeded")
	}
}

// readOnly makes path unwritable even for root (who ignores mode bits) with
// the immutable attribute, or skips when the file system cannot.
func readOnly(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(path, 0o700) })
		return
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("cannot make %s immutable: %v %s", path, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
}

func TestOpenUnwritableDir(t *testing.T) {
	dir := t.TempDir()
	readOnly(t, dir)
	openFails(t, dir, "unable to open")
	openFails(t, filepath.Join(dir, "state"), "mkdir") // cannot even create state_dir
}

// A store whose file cannot be written is refused at Open, not at the first
// lease: SQLite would quietly open it read-only.
func TestOpenReadOnlyFile(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	s.Close()
	readOnly(t, filepath.Join(dir, FileName))
	openFails(t, dir, "read-only")
}

// A writer that holds the lock in another connection (as another process
// would) makes a write wait; the write goes through once the lock is freed.
func TestWriteWaitsForAnotherWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	other, err := sql.Open("sqlite", dsn(s.Path()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin() // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO lease VALUES ('rack1', 'bob', 0, ?)`, t0.Add(time.Hour).UnixNano()); err != nil {
		t.Fatal(err)
	}
	asking := make(chan struct{})
	testHookWrite = func() { close(asking) }
	t.Cleanup(func() { testHookWrite = nil })
	done := make(chan error, 1)
	go func() {
		_, err := s.Lease(ctx, "rack1", "alice", time.Minute, t0)
		done <- err
	}()
	<-asking
	// Reads go on while the writer waits (WAL), and do not see bob's row yet.
	if _, ok, err := s.LeaseOf(ctx, "rack1", t0); ok || err != nil {
		t.Fatalf("read during another's write: %v %v", ok, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// The lease began before bob's commit and ended after it with bob's
	// lease in view: it waited for the lock rather than failing or racing.
	heldBy(t, <-done, "bob", t0.Add(time.Hour))
}

func TestWriteHonoursContext(t *testing.T) {
	s := open(t, t.TempDir())
	s.wsem <- struct{}{} // another goroutine of this process is writing
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Lease(ctx, "rack1", "alice", time.Minute, t0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lease with a cancelled context waiting for the writer: %v", err)
	}
	<-s.wsem
}

func BenchmarkLeaseRoundTrip(b *testing.B) {
	ctx := context.Background()
	s := open(b, b.TempDir())
	var ds latency.Latencies
	now := t0
	for b.Loop() {
		now = now.Add(time.Second)
		ds.Time(func() {
			if _, err := s.Lease(ctx, "rack1", "alice", time.Hour, now); err != nil {
				b.Fatal(err)
			}
			if _, ok, err := s.LeaseOf(ctx, "rack1", now); !ok || err != nil {
				b.Fatal(ok, err)
			}
		})
	}
	ds.Report(b, "lease+leaseof-")
}

// BenchmarkOpen is the Open of an existing store (a restart), with the first
// query; the first run of the process also pays SQLite's initialisation.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	open(b, dir).Close()
	var ds latency.Latencies
	for b.Loop() {
		ds.Time(func() {
			s, err := Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := s.LeaseOf(context.Background(), "rack1", t0); err != nil {
				b.Fatal(err)
			}
			s.Close()
		})
	}
	ds.Report(b, "open-")
}

// childOpen times the first Open (and query) of an existing store in a fresh
// process, which pays SQLite's initialisation, for BenchmarkOpenFirst.
func childOpen() int {
	began := time.Now()
	s, err := Open(os.Getenv("STORE_DIR"))
	if err == nil {
		_, _, err = s.LeaseOf(context.Background(), "rack1", t0)
	}
	took := time.Since(began)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.Close()
	fmt.Println(took.Nanoseconds())
	return 0
}

// BenchmarkOpenFirst is what a `poligon run` pays: the first Open of the
// store in its process, timed inside a child of this test binary.
func BenchmarkOpenFirst(b *testing.B) {
	dir := b.TempDir()
	open(b, dir).Close()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var ds latency.Latencies
	for b.Loop() {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=open", "STORE_DIR="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatal(err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Duration(ns))
	}
	ds.Report(b, "first-open-")
}
