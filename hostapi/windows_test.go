package hostapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSessionScriptReadsTheEnvironmentOnce runs the guest's session finder
// on this host while a session keeps spawning short-lived children, as a
// desktop (or the agent's own pipeline) does: the process it picks may be
// gone a moment later, so the environment it hands on must be the one it
// read, never an empty re-read (which once reported an X11 session as
// Wayland).
func TestSessionScriptReadsTheEnvironmentOnce(t *testing.T) {
	user, err := exec.Command("id", "-un").Output()
	if err != nil {
		t.Skip("no id here")
	}
	churn := exec.Command("sh", "-c", "while :; do /bin/true; done")
	churn.Env = []string{"PATH=/usr/bin:/bin", "DISPLAY=:77"}
	if err := churn.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { churn.Process.Kill(); churn.Wait() })

	probe := sessionScript + `printf '%s\n' "$senv" | grep '^DISPLAY=' || { echo "found $found, no DISPLAY"; exit 1; }`
	for i := 0; i < 10; i++ {
		out, err := exec.Command("sh", "-c", probe, "poligon-session", strings.TrimSpace(string(user))).CombinedOutput()
		if err != nil {
			t.Fatalf("run %d: %v: %s", i, err, out)
		}
		if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "DISPLAY=") {
			t.Fatalf("run %d: senv has %q", i, got)
		}
	}
}
