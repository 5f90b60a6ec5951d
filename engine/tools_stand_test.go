package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/store"
)

// fakeStandServer is a server whose bench is the in-memory backend with a
// template "tiny": a clone boots at once with its agent up and a global
// address, and every guest command prints "ok".
func fakeStandServer(t *testing.T) (*Server, *config.Config, *backendtest.Backend) {
	t.Helper()
	be := backendtest.New("")
	be.AddTemplate(9000, "tiny")
	be.Hook("Start", func(ctx context.Context, c backendtest.Call) error {
		be.SetInterfaces(c.VMID, []backends.Interface{{Name: "eth0",
			Addresses: []net.IPNet{{IP: net.IPv4(10, 0, 2, byte(c.VMID-90)), Mask: net.CIDRMask(24, 32)}}}})
		return nil
	})
	be.SetExec(func(vmid int, req backends.ExecRequest) backends.ExecStatus {
		return backends.ExecStatus{Exited: true, Stdout: []byte("ok\n")}
	})
	cfg := testConfig(t, t.TempDir())
	s := testServer(t, cfg, app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) { return fakeBench{be}, nil }})
	return s, cfg, be
}

// stand_status shows no secret a step's command carries (the audit log's
// rule: secret-named values, typed text), in labels and in the errors that
// name the failed step, and each transcript relative to the state
// directory, where it is.
func TestStandStatusRedactsLabelsAndRelativeTranscripts(t *testing.T) {
	s, cfg, _ := fakeStandServer(t)
	cs := connect(t, s)
	secrets := []string{"hunter2", "tok-s3cr3t", "eyJhbGciOi.payload", "Pa55word", "typed-s3cret", "urlpass"}
	plan := `{"name": "sec", "machines": [{"role": "db", "template": "tiny", "steps": [
		{"exec": "mysql -u root --password=hunter2 -e 'select 1'"},
		{"exec": "export API_TOKEN=tok-s3cr3t; curl -H \"Authorization: Bearer eyJhbGciOi.payload\" http://10.0.2.2/"},
		{"exec": "echo root:Pa55word | chpasswd"},
		{"expect": {"command": "git clone https://bob:urlpass@git.example.org/r.git && echo ok", "contains": "ok"}},
		{"type": "typed-s3cret\n"},
		{"exec": "uname -a"},
		{"expect": {"command": "mysql --password=hunter2 -e 'select 1'", "contains": "nope", "timeout": 5}}]}]}`
	mustOK(t, cs, "stand_apply", map[string]any{"plan": json.RawMessage(plan)})
	v := waitStand(t, cs, "sec", stopped)
	raw, _ := json.MarshalIndent(v, "", "  ")
	if v.Status != store.StandFailed || v.Error == nil || !strings.Contains(*v.Error, "step 7 (expect mysql --password=<redacted 7 bytes>") {
		t.Fatalf("stand sec ended %s, want failed at step 7:\n%s", v.Status, raw)
	}
	for _, secret := range secrets {
		if strings.Contains(string(raw), secret) {
			t.Errorf("stand_status shows %q:\n%s", secret, raw)
		}
	}
	labels := []string{}
	for _, st := range v.Machines[0].Steps {
		labels = append(labels, st.Label)
	}
	for i, want := range []string{
		"exec mysql -u root --password=<redacted 7 bytes> -e 'select 1'",
		`exec export API_TOKEN=<redacted 10 bytes>; curl -H "Authorization: Bearer <redacted 18 bytes>" http://10.0.2.2/`,
		"exec echo root:<redacted 8 bytes> | chpasswd",
		`expect git clone https://bob:<redacted 7 bytes>@git.example.org/r.git && echo ok (contains "ok")`,
		"type <redacted 13 bytes>",
		"exec uname -a",
		`expect mysql --password=<redacted 7 bytes> -e 'select 1' (contains "nope")`,
	} {
		if i >= len(labels) {
			t.Fatalf("%d steps, want a step %d labelled %q", len(labels), i+1, want)
		}
		if labels[i] != want {
			t.Errorf("step %d label %q, want %q", i+1, labels[i], want)
		}
	}

	tr := v.Machines[0].Transcript
	if tr == "" || filepath.IsAbs(tr) || !strings.HasPrefix(tr, "transcripts/") {
		t.Fatalf("transcript %q: want a path relative to the state directory", tr)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, tr)); err != nil {
		t.Errorf("the transcript is not under the state directory: %v", err)
	}
	if strings.Contains(string(raw), cfg.StateDir) {
		t.Errorf("stand_status shows the state directory %s:\n%s", cfg.StateDir, raw)
	}
}

// phaseTimes is what a client reads of stand_status's times.
type phaseTimes struct {
	Machines []struct {
		Role    string
		Status  string
		Started time.Time
		Ended   *time.Time
		Seconds float64
		Phases  []struct {
			Name    string
			Started time.Time
			Ended   *time.Time
			Seconds float64
		}
		Steps []struct {
			Status  string
			Started *time.Time
			Ended   *time.Time
			Seconds float64
		}
	}
}

func readTimes(t *testing.T, cs *mcp.ClientSession, name string) phaseTimes {
	t.Helper()
	var v phaseTimes
	out := mustOK(t, cs, "stand_status", map[string]any{"stand": name})
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// stand_status times each machine's clone, boot, wait for the machines it
// needs, steps (each one) and snapshot: a running part to now, a finished
// one from its start to its end, the parts end to end making up the
// machine's own time.
func TestStandStatusPhaseTimes(t *testing.T) {
	s, _, be := fakeStandServer(t)
	cs := connect(t, s)
	gate := be.Gate("ExecStart") // holds the server's first step
	plan := `{"name": "times", "machines": [
		{"role": "server", "template": "tiny", "steps": [{"exec": "echo one"}, {"exec": "echo two"}]},
		{"role": "client", "template": "tiny", "steps": [{"expect": {"command": "wget -qO- http://{{ip.server}}/", "contains": "ok"}}]}]}`
	mustOK(t, cs, "stand_apply", map[string]any{"plan": json.RawMessage(plan)})
	<-gate.Arrived()
	waitStand(t, cs, "times", func(v stand.View) bool { return v.Machines[1].Status == "waiting" || stopped(v) })

	// Mid-build: the server is in its steps, the client waits for it.
	v := readTimes(t, cs, "times")
	names := func(i int) []string {
		var out []string
		for _, p := range v.Machines[i].Phases {
			out = append(out, p.Name)
		}
		return out
	}
	if got := strings.Join(names(0), " "); got != "cloning booting steps" {
		t.Fatalf("server phases mid-build: %s", got)
	}
	if got := strings.Join(names(1), " "); got != "cloning booting waiting" {
		t.Fatalf("client phases mid-build: %s", got)
	}
	for i := range v.Machines {
		ps := v.Machines[i].Phases
		last := ps[len(ps)-1]
		if last.Ended != nil || last.Seconds <= 0 {
			t.Errorf("%s: the running phase %s: ended %v, seconds %v (want none, and its time so far)", v.Machines[i].Role, last.Name, last.Ended, last.Seconds)
		}
	}
	if st := v.Machines[0].Steps[0]; st.Status != "running" || st.Seconds <= 0 || st.Ended != nil {
		t.Errorf("the running step: %+v", st)
	}
	gate.Open()
	if end := waitStand(t, cs, "times", stopped); end.Status != store.StandDone {
		t.Fatalf("stand times ended %s", end.Status)
	}

	v = readTimes(t, cs, "times")
	if got := strings.Join(names(0), " "); got != "cloning booting steps snapshot" {
		t.Errorf("server phases: %s", got)
	}
	if got := strings.Join(names(1), " "); got != "cloning booting waiting steps snapshot" {
		t.Errorf("client phases: %s", got)
	}
	near := func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
	for _, m := range v.Machines {
		sum := 0.0
		for i, p := range m.Phases {
			if p.Ended == nil || !near(p.Seconds, p.Ended.Sub(p.Started).Seconds()) {
				t.Errorf("%s phase %s: ended %v, seconds %v", m.Role, p.Name, p.Ended, p.Seconds)
				continue
			}
			if i > 0 && !m.Phases[i-1].Ended.Equal(p.Started) {
				t.Errorf("%s: phase %s starts %v, not where %s ended %v", m.Role, p.Name, p.Started, m.Phases[i-1].Name, m.Phases[i-1].Ended)
			}
			sum += p.Seconds
		}
		if !near(sum, m.Seconds) || !m.Phases[0].Started.Equal(m.Started) {
			t.Errorf("%s: phases sum to %v s from %v, the machine took %v s from %v", m.Role, sum, m.Phases[0].Started, m.Seconds, m.Started)
		}
		for n, st := range m.Steps {
			if st.Started == nil || st.Ended == nil || !near(st.Seconds, st.Ended.Sub(*st.Started).Seconds()) || st.Seconds <= 0 {
				t.Errorf("%s step %d: %+v", m.Role, n+1, st)
			}
		}
	}
	// The client's wait lasted until the server was done.
	if w := v.Machines[1].Phases[2]; w.Ended == nil || v.Machines[0].Ended == nil || w.Ended.Before(*v.Machines[0].Ended) {
		t.Errorf("the client stopped waiting at %v, before the server was done at %v", w.Ended, v.Machines[0].Ended)
	}
}
