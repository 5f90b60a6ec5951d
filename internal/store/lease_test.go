package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// t0 is the tests' clock: leases are computed from the now passed in, so no
// test depends on the wall clock.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)

func open(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func heldBy(t *testing.T, err error, holder string, until time.Time) {
	t.Helper()
	var he *HeldError
	if !errors.As(err, &he) {
		t.Fatalf("want a *HeldError by %s, got %v", holder, err)
	}
	if he.Holder != holder || !he.Until.Equal(until) {
		t.Fatalf("HeldError names %s until %s, want %s until %s", he.Holder, he.Until, holder, until)
	}
}

func TestLeaseConflictAndExtend(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())

	l, err := s.Lease(ctx, "rack1", "alice", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := Lease{Bench: "rack1", Holder: "alice", Since: t0, Until: t0.Add(time.Hour)}
	if l != want {
		t.Fatalf("lease = %+v, want %+v", l, want)
	}

	_, err = s.Lease(ctx, "rack1", "bob", time.Minute, t0.Add(time.Minute))
	heldBy(t, err, "alice", t0.Add(time.Hour))
	if got := err.Error(); got != "bench rack1 is leased by alice until 2026-12-01T11:00:00Z" {
		t.Fatalf("message %q", got)
	}

	// Extending keeps Since and moves Until to now+d.
	l, err = s.Lease(ctx, "rack1", "alice", 2*time.Hour, t0.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want.Until = t0.Add(150 * time.Minute)
	if l != want {
		t.Fatalf("extended = %+v, want %+v", l, want)
	}
	got, ok, err := s.LeaseOf(ctx, "rack1", t0.Add(time.Hour))
	if err != nil || !ok || got != want {
		t.Fatalf("LeaseOf = %+v %v %v, want %+v", got, ok, err, want)
	}

	// Another bench is independent.
	if _, err := s.Lease(ctx, "rack2", "bob", time.Minute, t0); err != nil {
		t.Fatal(err)
	}
	all, err := s.Leases(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all["rack1"].Holder != "alice" || all["rack2"].Holder != "bob" {
		t.Fatalf("Leases = %+v", all)
	}
}

func TestLeaseBadArguments(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	for _, c := range []struct {
		bench, holder string
		d             time.Duration
		now           time.Time
	}{
		{"rack1", "alice", 0, t0},
		{"rack1", "alice", -time.Minute, t0},
		{"", "alice", time.Minute, t0},
		{"rack1", "", time.Minute, t0},
		{"rack1", "alice", time.Duration(math.MaxInt64), t0}, // ends past 2262
	} {
		if _, err := s.Lease(ctx, c.bench, c.holder, c.d, c.now); err == nil {
			t.Errorf("Lease(%q, %q, %s) succeeded", c.bench, c.holder, c.d)
		}
	}
	if all, err := s.Leases(ctx, t0); err != nil || len(all) != 0 {
		t.Fatalf("refused leases left %v (%v)", all, err)
	}
}

func TestLeaseExpiry(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if _, err := s.Lease(ctx, "rack1", "alice", time.Minute, t0); err != nil {
		t.Fatal(err)
	}
	end := t0.Add(time.Minute)
	// Live until the last nanosecond before Until, free from Until on.
	if _, ok, _ := s.LeaseOf(ctx, "rack1", end.Add(-1)); !ok {
		t.Fatal("lease gone before its end")
	}
	if l, ok, err := s.LeaseOf(ctx, "rack1", end); ok || err != nil {
		t.Fatalf("lease live at its end: %+v %v", l, err)
	}
	if all, _ := s.Leases(ctx, end); len(all) != 0 {
		t.Fatalf("Leases at the end = %+v", all)
	}
	// An expired lease is taken afresh by anyone, with a new Since.
	l, err := s.Lease(ctx, "rack1", "bob", time.Minute, end)
	if err != nil {
		t.Fatal(err)
	}
	if l.Since != end || l.Holder != "bob" {
		t.Fatalf("after expiry = %+v", l)
	}
	// Taking again after one's own lease expired starts a new Since too.
	if _, err := s.Lease(ctx, "rack1", "bob", time.Minute, end.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if l, _, _ := s.LeaseOf(ctx, "rack1", end.Add(time.Hour)); l.Since != end.Add(time.Hour) {
		t.Fatalf("renewed after expiry: %+v", l)
	}
}

func TestLeaseSweepsExpired(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	for i := range 5 {
		if _, err := s.Lease(ctx, fmt.Sprint("old", i), "alice", time.Minute, t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Lease(ctx, "new", "bob", time.Minute, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow("SELECT count(*) FROM lease").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d rows after a write past their end, want 1", n)
	}
}

func TestRelease(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())

	// A bench never leased: releasing is a no-op.
	if err := s.Release(ctx, "rack1", "alice", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(ctx, "rack1", "alice", time.Hour, t0); err != nil {
		t.Fatal(err)
	}
	// Not yours: refused, nothing changed.
	heldBy(t, s.Release(ctx, "rack1", "bob", t0), "alice", t0.Add(time.Hour))
	if l, ok, _ := s.LeaseOf(ctx, "rack1", t0); !ok || l.Holder != "alice" {
		t.Fatalf("bob's refused release changed the lease: %+v %v", l, ok)
	}
	// Yours: released, the bench is free, and releasing again is fine.
	if err := s.Release(ctx, "rack1", "alice", t0); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.LeaseOf(ctx, "rack1", t0); ok {
		t.Fatal("released lease still live")
	}
	if err := s.Release(ctx, "rack1", "alice", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(ctx, "rack1", "bob", time.Hour, t0); err != nil {
		t.Fatal(err)
	}
	// Someone else's expired lease is a free bench: releasing it is fine too.
	if err := s.Release(ctx, "rack1", "alice", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// checkRace checks the results of holders racing for bench: exactly one
// won and every other was told the winner's name and end.
func checkRace(t *testing.T, bench string, results map[string]error, until time.Time) string {
	t.Helper()
	winner := ""
	for h, err := range results {
		if err == nil {
			if winner != "" {
				t.Fatalf("%s: both %s and %s took it", bench, winner, h)
			}
			winner = h
		}
	}
	if winner == "" {
		t.Fatalf("%s: nobody won: %v", bench, results)
	}
	for h, err := range results {
		if h != winner {
			heldBy(t, err, winner, until)
		}
	}
	return winner
}

func TestLeaseRaceGoroutines(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	const racers = 16
	for round := range 5 {
		bench := fmt.Sprint("rack", round)
		start := make(chan struct{})
		var mu sync.Mutex
		var wg sync.WaitGroup
		results := map[string]error{}
		for g := range racers {
			wg.Go(func() {
				holder := fmt.Sprint("g", g)
				<-start
				_, err := s.Lease(ctx, bench, holder, time.Hour, t0)
				mu.Lock()
				results[holder] = err
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		winner := checkRace(t, bench, results, t0.Add(time.Hour))
		if l, _, _ := s.LeaseOf(ctx, bench, t0); l.Holder != winner {
			t.Fatalf("%s: stored holder %s, winner %s", bench, l.Holder, winner)
		}
	}
}

// The child side of TestLeaseRaceProcesses: open the store, say "ready",
// wait for the go line, race for each bench and print one JSON line each.
const childEnv = "POLIGON_STORE_TEST_CHILD"

type childResult struct {
	Bench  string
	Err    string
	Holder string // of the HeldError
	Until  int64
}

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "1":
		os.Exit(child())
	case "open":
		os.Exit(childOpen())
	}
	os.Exit(m.Run())
}

func child() int {
	ctx := context.Background()
	s, err := Open(os.Getenv("STORE_DIR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	n, _ := strconv.Atoi(os.Getenv("STORE_BENCHES"))
	now, _ := strconv.ParseInt(os.Getenv("STORE_NOW"), 10, 64)
	holder := os.Getenv("STORE_HOLDER")
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := json.NewEncoder(os.Stdout)
	for i := range n {
		if os.Getenv("STORE_REVERSE") == "1" {
			i = n - 1 - i
		}
		r := childResult{Bench: fmt.Sprint("rack", i)}
		_, err := s.Lease(ctx, r.Bench, holder, time.Hour, time.Unix(0, now))
		var he *HeldError
		if errors.As(err, &he) {
			r.Holder, r.Until = he.Holder, he.Until.UnixNano()
		}
		if err != nil {
			r.Err = err.Error()
		}
		out.Encode(r)
	}
	return 0
}

func TestLeaseRaceProcesses(t *testing.T) {
	dir := t.TempDir() // no store yet: the children also race to create it
	// The two go through the benches in opposite orders, so however their
	// starts are skewed they meet somewhere and race for the same bench.
	const benches = 100
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type proc struct {
		holder string
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		out    *bufio.Scanner
	}
	var procs []*proc
	for i, holder := range []string{"alice", "bob"} {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "STORE_DIR="+dir, "STORE_HOLDER="+holder,
			fmt.Sprint("STORE_REVERSE=", i),
			fmt.Sprint("STORE_BENCHES=", benches), fmt.Sprint("STORE_NOW=", t0.UnixNano()))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		procs = append(procs, &proc{holder, cmd, stdin, bufio.NewScanner(stdout)})
	}
	for _, p := range procs {
		if !p.out.Scan() || p.out.Text() != "ready" {
			t.Fatalf("%s did not open the store: %q %v", p.holder, p.out.Text(), p.out.Err())
		}
	}
	// Both have the store open; release them together.
	for _, p := range procs {
		if _, err := fmt.Fprintln(p.stdin, "go"); err != nil {
			t.Fatal(err)
		}
	}
	results := map[string]map[string]error{} // bench -> holder -> error
	for _, p := range procs {
		for p.out.Scan() {
			var r childResult
			if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if results[r.Bench] == nil {
				results[r.Bench] = map[string]error{}
			}
			var err error
			if r.Err != "" {
				err = errors.New(r.Err)
				if r.Holder != "" {
					err = &HeldError{Bench: r.Bench, Holder: r.Holder, Until: time.Unix(0, r.Until)}
				}
			}
			results[r.Bench][p.holder] = err
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("%s: %v", p.holder, err)
		}
	}
	if len(results) != benches {
		t.Fatalf("results for %d benches, want %d", len(results), benches)
	}
	s := open(t, dir)
	wins := map[string]int{}
	for bench, r := range results {
		if len(r) != 2 {
			t.Fatalf("%s: %d results", bench, len(r))
		}
		winner := checkRace(t, bench, r, t0.Add(time.Hour))
		wins[winner]++
		if l, _, err := s.LeaseOf(context.Background(), bench, t0); err != nil || l.Holder != winner {
			t.Fatalf("%s: stored %+v (%v), winner %s", bench, l, err, winner)
		}
	}
	t.Logf("wins: %v", wins)
}

func TestLeasesSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Lease(ctx, "rack1", "alice", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(ctx, "rack2", "bob", time.Minute, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	all, err := s.Leases(ctx, t0.Add(30*time.Minute)) // rack2 has expired meanwhile
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all["rack1"] != want {
		t.Fatalf("after reopen: %+v, want only %+v", all, want)
	}
	_, err = s.Lease(ctx, "rack1", "bob", time.Minute, t0.Add(30*time.Minute))
	heldBy(t, err, "alice", t0.Add(time.Hour))
}
