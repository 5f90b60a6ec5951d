package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/internal/testvm"
)

// standStatus runs `poligon stand status NAME` and decodes it.
func standStatus(t *testing.T, e []string, name string) (status string, steps []string, out string) {
	t.Helper()
	out, errOut, code := poligon(t, e, "stand", "status", name)
	if code != 0 {
		t.Fatalf("stand status %s = exit %d: %s", name, code, errOut)
	}
	var v struct {
		Status   string
		Machines []struct{ Steps []struct{ Status string } }
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("stand status: %v\n%s", err, out)
	}
	for _, m := range v.Machines {
		for _, s := range m.Steps {
			steps = append(steps, s.Status)
		}
	}
	return v.Status, steps, out
}

var builderPID = regexp.MustCompile(`in the background \(pid (\d+)`)

// TestStandCommands: compile prints the module; apply hands the build to a
// detached poligon and answers at once; that builder killed with SIGKILL
// leaves the stand interrupted, and apply --resume --wait finishes it with
// a live view; destroy removes its VM.
func TestStandCommands(t *testing.T) {
	e := env(t, testvm.DataDir(t))
	plan := filepath.Join(t.TempDir(), "plan.json")
	os.WriteFile(plan, []byte(`{"name": "cli", "machines": [{"role": "box", "template": "tiny", "steps": [
		{"exec": "echo once >> /root/count"},
		{"exec": "sleep 3"},
		{"expect": {"command": "wc -l < /root/count", "contains": "1"}}]}]}`), 0o644)

	js, errOut, code := poligon(t, e, "stand", "compile", plan)
	if code != 0 || !strings.Contains(js, `vm.step(`) || !strings.Contains(js, `name: "stand_cli"`) {
		t.Fatalf("stand compile = exit %d: %s%s", code, js, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"name": "Bad-Name", "machines": []}`), 0o644)
	if _, errOut, code := poligon(t, e, "stand", "apply", bad); code != 1 || !strings.Contains(errOut, "error: the plan is invalid") {
		t.Fatalf("apply of a bad plan = exit %d: %s", code, errOut)
	}

	out, errOut, code := poligon(t, e, "stand", "apply", plan)
	m := builderPID.FindStringSubmatch(errOut)
	if code != 0 || !strings.Contains(out, `"status": "running"`) || m == nil {
		t.Fatalf("stand apply = exit %d: %s%s", code, out, errOut)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	for deadline := time.Now().Add(backendtest.HangGuard); ; {
		status, steps, out := standStatus(t, e, "cli")
		if status != "running" {
			t.Fatalf("the build stopped before it was killed: %s", out)
		}
		if len(steps) == 3 && steps[1] == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("step 2 never ran: %s", out)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, steps, out := standStatus(t, e, "cli")
		if status == "interrupted" {
			if steps[0] != "done" {
				t.Fatalf("step 1 lost: %s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not interrupted after its builder died: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}

	out, errOut, code = poligon(t, e, "stand", "apply", "--resume", "cli", "--wait")
	if code != 0 || !strings.Contains(out, `"status": "done"`) || !strings.Contains(errOut, "box") || !strings.Contains(errOut, "[3/3 steps]") {
		t.Fatalf("apply --resume --wait = exit %d:\n%s\n%s", code, out, errOut)
	}
	// The compiled module runs again on its own, as any script.
	_, _, st := standStatus(t, e, "cli")
	var v struct{ Machines []struct{ VMID int } }
	json.Unmarshal([]byte(st), &v)
	script := filepath.Join(t.TempDir(), "cli.js")
	os.WriteFile(script, []byte(js), 0o644)
	out, errOut, code = poligon(t, e, "run", script, "--vm", strconv.Itoa(v.Machines[0].VMID), "--param", "role=box", "--param", "from=3")
	if code != 0 || !strings.Contains(errOut+out, "box: 3 steps") {
		t.Fatalf("poligon run of the compiled stand = exit %d:\n%s%s", code, out, errOut)
	}
	list, _, _ := poligon(t, e, "stand", "status")
	if !strings.Contains(list, `"stand": "cli"`) {
		t.Errorf("stand status = %s", list)
	}
	out, errOut, code = poligon(t, e, "stand", "destroy", "cli")
	if code != 0 || !strings.Contains(out, `"ok": true`) || strings.Contains(out, `"destroyed": []`) {
		t.Fatalf("stand destroy = exit %d: %s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"stand"}, {"stand", "apply"}, {"stand", "destroy"}, {"stand", "frobnicate"}} {
		if _, errOut, code := poligon(t, e, args...); code != 2 {
			t.Errorf("poligon %s = exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
}

// `poligon stand plan --prompt` prints the planner's system prompt without
// a goal (as the README shows it) and asks no model: none is configured
// here. plan without a goal or --prompt is still a usage error.
func TestStandPlanPrompt(t *testing.T) {
	e := env(t, testvm.ShortTempDir(t))
	out, errOut, code := poligon(t, e, "stand", "plan", "--prompt")
	if code != 0 || !strings.Contains(out, "You write stand plans for poligon") || !strings.Contains(out, "tester-repro-<name>-<role>") {
		t.Fatalf("stand plan --prompt = exit %d:\n%s%s", code, out, errOut)
	}
	if _, errOut, code := poligon(t, e, "stand", "plan"); code != 2 || !strings.Contains(errOut, "usage: poligon stand") {
		t.Errorf("stand plan without a goal = exit %d: %s", code, errOut)
	}
}
