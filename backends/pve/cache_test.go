package pve

import (
	"fmt"
	"testing"
	"time"
)

func TestSessionsOfIdleTokensAreForgotten(t *testing.T) {
	ep := &endpointState{nodes: map[int]string{}, recent: map[string]recentVM{}, sessions: map[string]*session{}}
	old := ep.session("typo-token")
	withConsole := ep.session("console-token")
	withConsole.consoles[100] = &console{}
	fresh := ep.session("fresh-token")
	long := time.Now().Add(-2 * sessionIdle)
	old.lastUse, withConsole.lastUse = long, long

	ep.session("new-token") // a new token sweeps the idle ones
	if _, ok := ep.sessions["typo-token"]; ok {
		t.Error("an idle token without consoles was kept")
	}
	if ep.sessions["console-token"] != withConsole || ep.sessions["fresh-token"] != fresh {
		t.Error("a token with a console, or a recent one, was forgotten")
	}
	if ep.session("fresh-token") != fresh {
		t.Error("a known token got a new session")
	}
}

// A flood of distinct (bogus) tokens must not hold memory for sessionIdle:
// above maxSessions a new token also evicts those idle for crowdedIdle.
func TestSessionFloodIsCapped(t *testing.T) {
	ep := &endpointState{nodes: map[int]string{}, recent: map[string]recentVM{}, sessions: map[string]*session{}}
	longAgo := time.Now().Add(-2 * crowdedIdle)
	for i := range maxSessions {
		ep.session(fmt.Sprintf("bogus-%d", i)).lastUse = longAgo
	}
	withConsole := ep.session("bogus-0")
	withConsole.lastUse = longAgo
	withConsole.consoles[100] = &console{}
	busy := ep.session("bogus-1")
	busy.lastUse = longAgo
	busy.mu.Lock() // in use by another goroutine: pruning must skip, not wait
	recent := ep.session("bogus-2")
	recent.lastUse = time.Now().Add(-crowdedIdle / 2)

	ep.session("one-more")
	busy.mu.Unlock()
	if n := len(ep.sessions); n != 4 {
		t.Errorf("%d sessions after a flood, want 4 (the console, the busy, the recent one and the new one)", n)
	}
	for key, s := range map[string]*session{"bogus-0": withConsole, "bogus-1": busy, "bogus-2": recent} {
		if ep.sessions[key] != s {
			t.Errorf("session %s was evicted", key)
		}
	}
	if _, ok := ep.sessions["one-more"]; !ok {
		t.Error("the new session is missing")
	}
}

// Below the cap, only sessionIdle forgets a token: a burst of clients that
// stays under maxSessions keeps its caches.
func TestSessionsUnderTheCapKeepTheirCaches(t *testing.T) {
	ep := &endpointState{nodes: map[int]string{}, recent: map[string]recentVM{}, sessions: map[string]*session{}}
	longAgo := time.Now().Add(-2 * crowdedIdle)
	for i := range maxSessions - 1 {
		ep.session(fmt.Sprintf("client-%d", i)).lastUse = longAgo
	}
	ep.session("one-more")
	if n := len(ep.sessions); n != maxSessions {
		t.Errorf("%d sessions, want %d: sessions idle for less than %v were evicted under the cap", n, maxSessions, sessionIdle)
	}
}
