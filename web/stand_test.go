package web

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
)

// fakeBench serves the in-memory backend as a bench.
type fakeBench struct{ be *backendtest.Backend }

func (f fakeBench) Open(context.Context, hostapi.Credentials) (backends.Backend, string, error) {
	return f.be, "fake", nil
}
func (fakeBench) Problems() []string       { return nil }
func (fakeBench) Consoles() int            { return 0 }
func (fakeBench) Facts() map[string]string { return map[string]string{"type": "test"} }
func (fakeBench) Close()                   {}

// A stand's page follows its build: each step shows running, then done,
// as the machine's guest finishes it, without a reload. The bench is the
// in-memory backend, whose guest runs each step only when the test lets
// it.
func TestStandPageFollowsTheBuild(t *testing.T) {
	browser := newBrowser(t)
	be := backendtest.New("")
	be.AddTemplate(9000, "tiny")
	be.Hook("Start", func(ctx context.Context, c backendtest.Call) error {
		be.SetInterfaces(c.VMID, []backends.Interface{{Name: "eth0",
			Addresses: []net.IPNet{{IP: net.IPv4(10, 0, 2, 15), Mask: net.CIDRMask(24, 32)}}}})
		return nil
	})
	const steps = 3
	proceed := make([]chan struct{}, steps+1)
	for i := range proceed {
		proceed[i] = make(chan struct{})
	}
	be.SetExec(func(vmid int, req backends.ExecRequest) backends.ExecStatus {
		for n := 1; n <= steps; n++ {
			if strings.Contains(strings.Join(req.Args, " "), fmt.Sprintf("step-%d", n)) {
				<-proceed[n]
			}
		}
		return backends.ExecStatus{Exited: true, Stdout: []byte("ok\n")}
	})
	e := newEnv(t, testConfig(t, t.TempDir()), app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) {
		return fakeBench{be}, nil
	}}, Options{})
	t.Cleanup(func() { // a build still waiting lets go
		for _, ch := range proceed[1:] {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	})
	plan := `{"name": "shop", "machines": [{"role": "db", "template": "tiny", "steps": [
		{"exec": "echo step-1"}, {"exec": "echo step-2"}, {"exec": "echo step-3"}]}]}`
	e.call(t, "stand_apply", map[string]any{"plan": json.RawMessage(plan)})

	page := tab(t, browser)
	login(t, page, e.url, aliceToken)
	do(t, page, chromedp.Navigate(e.url+"/ui/stands"))
	waitFor(t, page, `document.querySelector('#stands a[href="/ui/stands/local/shop"]')`, 10*time.Second)
	do(t, page, chromedp.Click(chromedp.CSS(`#stands a[href="/ui/stands/local/shop"]`)))
	status := func(n int) string {
		return fmt.Sprintf(`(document.querySelector('#machines li[data-n="%d"] .status') || {}).textContent`, n)
	}
	for n := 1; n <= steps; n++ {
		waitFor(t, page, status(n)+` === "running"`, 20*time.Second)
		for later := n + 1; later <= steps; later++ {
			if got := eval[string](t, page, status(later)); got != "pending" {
				t.Errorf("while step %d runs, step %d is %q", n, later, got)
			}
		}
		close(proceed[n])
		waitFor(t, page, status(n)+` === "done"`, 20*time.Second)
	}
	waitFor(t, page, `document.getElementById("stand-status").textContent === "done"`, 20*time.Second)
	// Another owner's stand is not there for bob.
	other := tab(t, browser)
	login(t, other, e.url, bobToken)
	if got := fetch(t, other, "GET", "/ui/stands/local/shop", nil, ""); got.Status != 404 || strings.Contains(got.Body, "step-1") {
		t.Errorf("bob GET alice's stand: %d %q", got.Status, got.Body)
	}
}
