package pve

import (
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
