package backendtest

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// HangGuard bounds the waits of these helpers: long enough for any loaded
// machine, so reaching it means the event never came, not that it was slow.
const HangGuard = 3 * time.Minute

// Parked reports whether some goroutine is blocked (in a select, a channel
// operation, a lock or a cond) with fn as its innermost frame outside the
// runtime: fn has done its checks and now waits for something to happen.
// fn is a function as tracebacks name it, package-qualified with the last
// path element at least: "rfb.(*Client).liveLink",
// "hostapi.(*Locks).Acquire".
func Parked(fn string) bool {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if parkedIn(g, fn) {
			return true
		}
	}
	return false
}

// blockedStates are the goroutine states of a wait (the header's
// "[select]", "[chan receive, 2 minutes]", ...).
var blockedStates = []string{"[select", "[chan receive", "[chan send", "[sync.Mutex.Lock", "[sync.RWMutex", "[sync.Cond.Wait", "[semacquire", "[sleep"}

func parkedIn(g, fn string) bool {
	lines := strings.Split(g, "\n")
	if len(lines) < 2 {
		return false
	}
	blocked := false
	for _, s := range blockedStates {
		if strings.Contains(lines[0], s) {
			blocked = true
		}
	}
	if !blocked {
		return false
	}
	for _, l := range lines[1:] {
		if l == "" || l[0] == '\t' {
			continue // a file:line
		}
		name := l
		if i := strings.LastIndex(l, "("); i > 0 {
			name = l[:i]
		}
		if strings.HasPrefix(name, "runtime.") || strings.HasPrefix(name, "sync.") || strings.HasPrefix(name, "internal/") || strings.HasPrefix(name, "time.") {
			continue
		}
		return name == fn || strings.HasSuffix(name, "/"+fn)
	}
	return false
}

// WaitParked waits until a goroutine is parked in fn (see Parked), so a
// test acts only once a waiter really waits. It fails tb when ended
// answers true first (the waiter returned without waiting; nil: never) or
// after HangGuard.
func WaitParked(tb testing.TB, fn string, ended func() bool) {
	tb.Helper()
	deadline := time.Now().Add(HangGuard)
	for !Parked(fn) {
		if ended != nil && ended() {
			tb.Fatalf("the call ended before it waited in %s", fn)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no goroutine waited in %s within %s", fn, HangGuard)
		}
		time.Sleep(5 * time.Millisecond) // each look stops the world a moment
	}
}
