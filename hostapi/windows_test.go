package hostapi

import (
	"errors"
	"image"
	"os"
	"os/exec"
	"path/filepath"
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

// TestWindowsScriptPlacesWindowsByXwininfo runs windows.sh on this host
// against stand-ins for xdotool and xwininfo that answer what they answer
// under twm for a reparented xterm (xdotool: the window's offset in its
// frame added twice, 19 px too low): the window is placed where xwininfo
// puts it, a border width inside its corner; without xwininfo it is
// unplaced, with a hint on installing it; without xdotool the script says
// so.
func TestWindowsScriptPlacesWindowsByXwininfo(t *testing.T) {
	user, err := exec.Command("id", "-un").Output()
	if err != nil {
		t.Skip("no id here")
	}
	session := exec.Command("sleep", "600")
	session.Env = []string{"DISPLAY=:77"}
	if err := session.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Process.Kill(); session.Wait() })

	// A PATH of the few tools the script uses, and the stand-ins asked for.
	bin := func(stubs map[string]string) string {
		dir := t.TempDir()
		for _, tool := range []string{"sh", "awk", "grep", "sed", "sort", "tr", "id", "stat", "ls", "cat"} {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Skipf("no %s here", tool)
			}
			if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
				t.Fatal(err)
			}
		}
		for name, body := range stubs {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	const xdotool = `case "$1 $3" in
"search --name") echo 4194316 ;;
"getwindowname "*) echo xterm ;;
"getwindowgeometry "*) printf 'WINDOW=4194316\nX=42\nY=80\nWIDTH=484\nHEIGHT=316\nSCREEN=0\n' ;;
esac`
	const xwininfo = `cat <<'E'

xwininfo: Window id: 0x40000c "xterm"

  Absolute upper-left X:  40
  Absolute upper-left Y:  59
  Relative upper-left X:  0
  Relative upper-left Y:  19
  Width: 484
  Height: 316
  Depth: 24
  Border width: 2
  Map State: IsViewable
  Corners:  +40+59  -752+59  -752-421  +40-421
  -geometry 80x24+40+40

E`
	run := func(stubs map[string]string) (string, int) {
		dir := bin(stubs)
		cmd := exec.Command(filepath.Join(dir, "sh"), "-c", windowsScript, "poligon-windows", strings.TrimSpace(string(user)), "xterm")
		cmd.Env = []string{"PATH=" + dir}
		out, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}

	out, code := run(map[string]string{"xdotool": xdotool, "xwininfo": xwininfo})
	pm, list := parseWindows(out, 101)
	if code != 0 || pm != "-" || len(list) != 1 {
		t.Fatalf("exit %d, pm %q, windows %+v; output:\n%s", code, pm, list, out)
	}
	if w := list[0]; w.ID != "4194316" || w.Title != "xterm" || w.Unplaced != nil || w.Box != image.Rect(42, 61, 42+484, 61+316) {
		t.Fatalf("with xwininfo: %+v, want 4194316 \"xterm\" at 42,61 484x316", w)
	}

	out, code = run(map[string]string{"xdotool": xdotool})
	_, list = parseWindows(out, 101)
	if code != 0 || len(list) != 1 {
		t.Fatalf("exit %d, windows %+v; output:\n%s", code, list, out)
	}
	if w := list[0]; w.Unplaced == nil || w.Box != (image.Rectangle{}) || !strings.Contains(HintOf(w.Unplaced), `"apt-get install -y x11-utils" (Debian, Ubuntu)`) {
		t.Fatalf("without xwininfo: %+v (hint %q), want unplaced with how to install it", w, HintOf(w.Unplaced))
	}

	if out, code = run(nil); code != 6 {
		t.Fatalf("without xdotool: exit %d, want 6; output:\n%s", code, out)
	}
}

// TestInstallCommandFollowsThePackageManager: the hints name the guest's
// own package manager, or every family's when the guest has none of them.
func TestInstallCommandFollowsThePackageManager(t *testing.T) {
	if got := installCommand("dnf", "xwininfo"); got != `"dnf install -y xwininfo"` {
		t.Errorf("dnf: %s", got)
	}
	if got := installCommand("apt-get", "xwininfo"); got != `"apt-get install -y x11-utils"` {
		t.Errorf("apt-get: %s", got)
	}
	all := installCommand("-", "xdotool")
	for _, want := range []string{`"apt-get install -y xdotool"`, `"dnf install -y xdotool"`, `"zypper --non-interactive install xdotool"`, `"apk add xdotool"`} {
		if !strings.Contains(all, want) {
			t.Errorf("no package manager: %s lacks %s", all, want)
		}
	}
}
