package pve

import (
	"fmt"
	"testing"
	"time"
)

func TestIdleTokensAreForgotten(t *testing.T) {
	cl := NewCluster()
	old := cl.token("typo-token")
	withConsole := cl.token("console-token")
	withConsole.consoles[100] = &console{}
	fresh := cl.token("fresh-token")
	long := time.Now().Add(-2 * tokenIdle)
	old.lastUse, withConsole.lastUse = long, long

	cl.token("new-token") // a new token sweeps the idle ones
	if _, ok := cl.tokens["typo-token"]; ok {
		t.Error("an idle token without consoles was kept")
	}
	if cl.tokens["console-token"] != withConsole || cl.tokens["fresh-token"] != fresh {
		t.Error("a token with a console, or a recent one, was forgotten")
	}
	if cl.token("fresh-token") != fresh {
		t.Error("a known token got a new state")
	}
}

// A flood of distinct (bogus) tokens must not hold memory for tokenIdle:
// above maxTokens a new token also evicts those idle for crowdedIdle.
func TestTokenFloodIsCapped(t *testing.T) {
	cl := NewCluster()
	longAgo := time.Now().Add(-2 * crowdedIdle)
	for i := range maxTokens {
		cl.token(fmt.Sprintf("bogus-%d", i)).lastUse = longAgo
	}
	withConsole := cl.token("bogus-0")
	withConsole.lastUse = longAgo
	withConsole.consoles[100] = &console{}
	busy := cl.token("bogus-1")
	busy.lastUse = longAgo
	busy.mu.Lock() // in use by another goroutine: pruning must skip, not wait
	recent := cl.token("bogus-2")
	recent.lastUse = time.Now().Add(-crowdedIdle / 2)

	cl.token("one-more")
	busy.mu.Unlock()
	if n := len(cl.tokens); n != 4 {
		t.Errorf("%d token states after a flood, want 4 (the console, the busy, the recent one and the new one)", n)
	}
	for key, s := range map[string]*tokenState{"bogus-0": withConsole, "bogus-1": busy, "bogus-2": recent} {
		if cl.tokens[key] != s {
			t.Errorf("token %s was evicted", key)
		}
	}
	if _, ok := cl.tokens["one-more"]; !ok {
		t.Error("the new token state is missing")
	}
}

// Below the cap, only tokenIdle forgets a token: a burst of clients that
// stays under maxTokens keeps its caches.
func TestTokensUnderTheCapKeepTheirCaches(t *testing.T) {
	cl := NewCluster()
	longAgo := time.Now().Add(-2 * crowdedIdle)
	for i := range maxTokens - 1 {
		cl.token(fmt.Sprintf("client-%d", i)).lastUse = longAgo
	}
	cl.token("one-more")
	if n := len(cl.tokens); n != maxTokens {
		t.Errorf("%d token states, want %d: tokens idle for less than %v were evicted under the cap", n, maxTokens, tokenIdle)
	}
}
