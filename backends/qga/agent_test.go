package qga

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestInfo(t *testing.T) {
	c := startAgent(t).dial(t)
	info, err := c.Info(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Version == "" || len(info.Commands) < 10 {
		t.Fatalf("info: %+v", info)
	}
	if !info.Enabled("guest-exec") {
		t.Error("guest-exec not reported enabled")
	}
	if info.Enabled("guest-shutdown") {
		t.Error("guest-shutdown reported enabled although the test agent blocks it")
	}
}

// guest-shutdown answers nothing when it works. The test agent has it
// disabled (it would act on this host), so its error reply is left in the
// stream: proof the command went out, and the next call must skip it.
func TestShutdownSendsAndNextCallSkipsTheAnswer(t *testing.T) {
	c := startAgent(t).dial(t)
	ctx := testContext(t)
	if err := c.Shutdown(ctx, "reboot"); err != nil {
		t.Fatal(err)
	}

	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	leftover, err := c.readLine()
	c.conn.SetReadDeadline(time.Time{})
	if err != nil || !strings.Contains(string(leftover), "guest-shutdown") {
		t.Fatalf("the agent's answer to guest-shutdown: %q, %v", leftover, err)
	}

	// Another shutdown's error reply, left unread this time.
	if err := c.Shutdown(ctx, ""); err != nil {
		t.Fatal(err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pingCtx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.Version == "" {
		t.Fatalf("info after shutdown: %+v, %v", info, err)
	}
}
