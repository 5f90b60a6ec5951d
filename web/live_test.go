package web

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/testvm"
	"github.com/poligon/poligon/internal/trace"
)

// TestLiveView drives the pages in a real browser against a real VM (the
// tiny template under QEMU), one VM shared by the subtests: alice owns it,
// bob owns a VM of his own, and neither sees the other's.
func TestLiveView(t *testing.T) {
	data := testvm.DataDir(t)
	browser := newBrowser(t)
	e := newEnv(t, testConfig(t, data), app.Options{}, Options{})
	ctx := context.Background()
	vmid := e.bootTiny(t, "live")
	bobVM := bobsVM(t, e)

	alice, bob := tab(t, browser), tab(t, browser)
	login(t, alice, e.url, aliceToken)
	login(t, bob, e.url, bobToken)
	vmURL := fmt.Sprintf("/ui/vm/local/%d", vmid)

	t.Run("your VMs and no one else's", func(t *testing.T) {
		rows := func(ctx context.Context) string {
			return eval[string](t, ctx, `Array.from(document.querySelectorAll("#vms tbody tr")).map(r => r.textContent).join("\n")`)
		}
		// The list as rendered, then as the page's script refreshed it.
		for _, after := range []time.Duration{0, 2500 * time.Millisecond} {
			time.Sleep(after)
			if got := rows(alice); !strings.Contains(got, "alice-repro-live") || !strings.Contains(got, "running") || strings.Contains(got, "bob") {
				t.Errorf("alice's list after %s: %q", after, got)
			}
			if got := rows(bob); !strings.Contains(got, "bob-repro-secretvm") || strings.Contains(got, "alice") {
				t.Errorf("bob's list after %s: %q", after, got)
			}
		}
	})

	t.Run("another owner's VM answers 404 and shows nothing", func(t *testing.T) {
		for _, path := range []string{"", "/console", "/trace", "/frame/0123abcd"} {
			got := fetch(t, alice, "GET", fmt.Sprintf("/ui/vm/local/%d%s", bobVM, path), nil, "")
			if got.Status != http.StatusNotFound || strings.Contains(got.Body, "secretvm") || strings.Contains(got.Body, "bob") {
				t.Errorf("alice GET bob's VM%s: %d %q", path, got.Status, got.Body)
			}
			got = fetch(t, bob, "GET", vmURL+path, nil, "")
			if got.Status != http.StatusNotFound || strings.Contains(got.Body, "alice-repro") {
				t.Errorf("bob GET alice's VM%s: %d %q", path, got.Status, got.Body)
			}
		}
		// The console socket itself, with alice's cookie from her origin.
		url := "ws" + strings.TrimPrefix(e.url, "http") + fmt.Sprintf("/ui/vm/local/%d/console", bobVM)
		h := http.Header{"Cookie": {cookieName + "=" + sessionCookie(t, alice)}, "Origin": {e.url}}
		if conn, resp, err := websocket.DefaultDialer.Dial(url, h); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
			if conn != nil {
				conn.Close()
			}
			t.Errorf("alice's console socket to bob's VM: %v %v", resp, err)
		}
	})

	// alice's VM page, for the subtests that follow.
	do(t, alice, chromedp.Navigate(e.url+vmURL))
	waitFor(t, alice, `Number(document.getElementById("console").dataset.frames || 0) > 0`, 30*time.Second)

	t.Run("the canvas shows the VM's pixels", func(t *testing.T) {
		// The console blinks its cursor: compare at a moment both show the
		// same screen.
		var diff int
		for try := 0; try < 20; try++ {
			shot := screenshot(t, e, vmid)
			canvas := canvasPixels(t, alice)
			if diff = differingPixels(shot, canvas); diff == 0 {
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
		t.Fatalf("the canvas and ui_screenshot differ in %d pixels", diff)
	})

	t.Run("a request without the CSRF token changes nothing", func(t *testing.T) {
		body := `{"kind": "type", "text": "echo csrf > /csrf-made\n"}`
		for _, h := range []map[string]string{{"Content-Type": "application/json"}, {"X-CSRF-Token": "not-the-token"}} {
			if got := fetch(t, alice, "POST", vmURL+"/input", h, body); got.Status != http.StatusForbidden {
				t.Errorf("input with headers %v: %d %q", h, got.Status, got.Body)
			}
		}
		if got := fetch(t, alice, "POST", "/ui/logout", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "csrf=wrong"); got.Status != http.StatusForbidden {
			t.Errorf("logout without the token: %d", got.Status)
		}
		if got := fetch(t, alice, "GET", "/ui/api/vms", nil, ""); got.Status != http.StatusOK {
			t.Errorf("alice was logged out by a request without the token: %d", got.Status)
		}
		time.Sleep(time.Second)
		if out := e.exec(t, vmid, "test -e /csrf-made && echo made || echo none"); !strings.Contains(out, "none") {
			t.Errorf("the guest: %q", out)
		}
	})

	t.Run("typing in the browser reaches the guest", func(t *testing.T) {
		do(t, alice, chromedp.Click(chromedp.ID("control")), chromedp.Focus(chromedp.ID("console")),
			chromedp.KeyEvent("echo web-typed > /web-typed\n"))
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(e.exec(t, vmid, "cat /web-typed 2>/dev/null; true"), "web-typed") {
			if time.Now().After(deadline) {
				t.Fatalf("the guest has no /web-typed; the page says %q",
					eval[string](t, alice, `document.getElementById("input-status").textContent`))
			}
			time.Sleep(300 * time.Millisecond)
		}
		// Each input is a trace step (source web) and an audit record
		// (transport web), the typed text by its size only.
		steps := waitSteps(t, e, vmid, func(s trace.Step) bool { return s.Source == trace.SourceWeb && s.Call == "ui_type" })
		for _, s := range steps {
			if s.Source == trace.SourceWeb && (strings.Contains(string(s.Args), "web-typed") || s.Caller != "alice" || s.Outcome != "ok") {
				t.Errorf("a web step: %+v", s)
			}
		}
		audit, err := os.ReadFile(e.app.Config.AuditLog)
		if err != nil {
			t.Fatal(err)
		}
		web := 0
		for _, line := range strings.Split(string(audit), "\n") {
			if strings.Contains(line, `"transport":"web"`) {
				web++
				if strings.Contains(line, "web-typed") {
					t.Errorf("typed text in the audit log: %s", line)
				}
			}
		}
		if web == 0 {
			t.Errorf("no audit record of the browser's input: %s", audit)
		}
		// The page's trace shows the steps as they come.
		waitFor(t, alice, `Array.from(document.querySelectorAll("#trace tbody tr")).some(r => r.cells[1].textContent === "web")`, 10*time.Second)
	})

	t.Run("a viewer who does not own the VM cannot type", func(t *testing.T) {
		csrf := eval[string](t, bob, `document.querySelector('meta[name="csrf"]').content`)
		got := fetch(t, bob, "POST", vmURL+"/input", map[string]string{"X-CSRF-Token": csrf, "Content-Type": "application/json"},
			`{"kind": "type", "text": "echo bob > /bob-made\n"}`)
		if got.Status != http.StatusNotFound || strings.Contains(got.Body, "alice") {
			t.Errorf("bob's input on alice's VM: %d %q", got.Status, got.Body)
		}
		time.Sleep(time.Second)
		if out := e.exec(t, vmid, "test -e /bob-made && echo made || echo none"); !strings.Contains(out, "none") {
			t.Errorf("the guest: %q", out)
		}
	})

	t.Run("a VM a long call holds answers busy, the page does not wait", func(t *testing.T) {
		who, err := e.app.Caller(ctx, e.app.Local(), "")
		if err != nil {
			t.Fatal(err)
		}
		_, release, err := who.LockVM(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		csrf := eval[string](t, alice, `document.querySelector('meta[name="csrf"]').content`)
		start := time.Now()
		got := fetch(t, alice, "POST", vmURL+"/input", map[string]string{"X-CSRF-Token": csrf, "Content-Type": "application/json"}, `{"kind": "key", "key": "ret"}`)
		if got.Status != http.StatusConflict || !strings.Contains(got.Body, "busy") || time.Since(start) > 5*time.Second {
			t.Errorf("input on a held VM: %d %q after %s", got.Status, got.Body, time.Since(start))
		}
	})

	t.Run("an exported trace opened from disk shows every frame offline", func(t *testing.T) {
		const password = "hunter2-Pa55word"
		e.call(t, "ui_type", map[string]any{"vmid": vmid, "text": password})
		e.call(t, "ui_key", map[string]any{"vmid": vmid, "key": "ret"})
		e.call(t, "ui_screenshot", map[string]any{"vmid": vmid})
		waitSteps(t, e, vmid, func(s trace.Step) bool { return s.Call == "ui_screenshot" })
		who, err := e.app.Caller(ctx, e.app.Local(), "")
		if err != nil {
			t.Fatal(err)
		}
		ex, err := e.app.TraceExport(ctx, who, "local", trace.Query{VMID: vmid}, "vmid live")
		if err != nil {
			t.Fatal(err)
		}
		var page bytes.Buffer
		if err := ex.HTML(&page); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(page.String(), password) {
			t.Fatal("the password typed with ui_type is in the exported page")
		}
		file := filepath.Join(t.TempDir(), "trace.html")
		if err := os.WriteFile(file, page.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		frames := 0
		for _, s := range ex.Steps {
			for _, d := range []string{s.Before, s.After} {
				if d != "" {
					frames++
				}
			}
		}
		if frames < 4 {
			t.Fatalf("the export's steps show %d frames; want the screen steps' before and after", frames)
		}

		offline := tab(t, browser)
		listen, stopListening := context.WithCancel(offline)
		requests := chromedp.Events(listen, network.RequestWillBeSent)
		if _, err := chromedp.Call(offline, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(offline, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{
			MatchedNetworkConditions: []*network.Conditions{{Offline: true}}}); err != nil {
			t.Fatal(err)
		}
		do(t, offline, chromedp.Navigate("file://"+file))
		waitFor(t, offline, `Array.from(document.images).every(i => i.complete)`, 20*time.Second)
		shown := eval[int](t, offline, `Array.from(document.querySelectorAll("img[data-frame]")).filter(i => i.naturalWidth > 0).length`)
		if shown != frames {
			t.Errorf("the page from disk shows %d frames of %d", shown, frames)
		}
		// No request left the page (the file itself is the only one).
		time.AfterFunc(500*time.Millisecond, stopListening)
		for ev, err := range requests {
			if err != nil {
				break
			}
			if u := ev.Request.URL; !strings.HasPrefix(u, "file:") && !strings.HasPrefix(u, "data:") {
				t.Errorf("the exported page requested %s", u)
			}
		}
	})

	t.Run("no credential in a page, a URL or the log", func(t *testing.T) {
		html := eval[string](t, alice, `document.documentElement.outerHTML`)
		for _, token := range []string{aliceToken, bobToken} {
			if strings.Contains(html, token) || strings.Contains(e.logs.String(), token) {
				t.Errorf("a bearer token is in a page or the log")
			}
		}
	})

	t.Run("a console socket closes once its VM is no longer yours", func(t *testing.T) {
		url := "ws" + strings.TrimPrefix(e.url, "http") + fmt.Sprintf("/ui/vm/local/%d/console", bobVM)
		h := http.Header{"Cookie": {cookieName + "=" + sessionCookie(t, bob)}, "Origin": {e.url}}
		conn, _, err := websocket.DefaultDialer.Dial(url, h)
		if err != nil {
			t.Fatalf("bob's console socket to his VM: %v", err)
		}
		defer conn.Close()
		who, err := e.app.Caller(ctx, hostapi.Credentials{Owner: "bob"}, "")
		if err != nil {
			t.Fatal(err)
		}
		vm, release, err := who.LockVM(ctx, bobVM)
		if err != nil {
			t.Fatal(err)
		}
		_, err = vm.Destroy(ctx, time.Minute)
		release()
		if err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(sessionCheck + 20*time.Second))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				var closed *websocket.CloseError
				if !errors.As(err, &closed) || closed.Code != websocket.ClosePolicyViolation {
					t.Fatalf("the socket of a destroyed VM ended with %v, want closed as no longer yours", err)
				}
				return
			}
		}
	})
}

// bobsVM makes a VM of bob's (cloned, not started), destroyed at the end.
func bobsVM(t *testing.T, e *liveEnv) int {
	t.Helper()
	ctx := context.Background()
	bob, err := e.app.Caller(ctx, hostapi.Credentials{Owner: "bob"}, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := bob.Clone(ctx, 9000, "secretvm", false, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vm, release, err := bob.LockVM(ctx, res.VMID)
		if err == nil {
			vm.Destroy(ctx, time.Minute)
			release()
		}
	})
	return res.VMID
}

// waitSteps waits until the VM's trace has a step ok accepts (the recorder
// writes a moment after the call) and answers the VM's steps.
func waitSteps(t *testing.T, e *liveEnv, vmid int, ok func(trace.Step) bool) []trace.Step {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		steps, err := e.app.Trace.Steps(context.Background(), trace.Query{VMID: vmid})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			if ok(s) {
				return steps
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such step in the trace of vmid %d: %d steps", vmid, len(steps))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot takes a ui_screenshot as alice and decodes it.
func screenshot(t testing.TB, e *liveEnv, vmid int) *image.RGBA {
	t.Helper()
	res := e.call(t, "ui_screenshot", map[string]any{"vmid": vmid})
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			m, err := png.Decode(bytes.NewReader(img.Data))
			if err != nil {
				t.Fatal(err)
			}
			out := image.NewRGBA(m.Bounds())
			draw.Draw(out, out.Bounds(), m, m.Bounds().Min, draw.Src)
			return out
		}
	}
	t.Fatal("ui_screenshot answered no image")
	return nil
}

// canvasPixels reads the console canvas's pixels.
func canvasPixels(t testing.TB, ctx context.Context) *image.RGBA {
	t.Helper()
	var got struct {
		W, H int
		Data string
	}
	raw := eval[string](t, ctx, `(() => {
		const c = document.getElementById("console");
		const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		let s = "";
		for (let i = 0; i < d.length; i += 8192) s += String.fromCharCode.apply(null, d.subarray(i, i + 8192));
		return JSON.stringify({W: c.width, H: c.height, Data: btoa(s)});
	})()`)
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	pix, err := base64.StdEncoding.DecodeString(got.Data)
	if err != nil {
		t.Fatal(err)
	}
	return &image.RGBA{Pix: pix, Stride: 4 * got.W, Rect: image.Rect(0, 0, got.W, got.H)}
}

// differingPixels counts the pixels two images differ in (all of them
// when their sizes differ).
func differingPixels(a, b *image.RGBA) int {
	if a.Bounds().Size() != b.Bounds().Size() {
		return a.Bounds().Dx() * a.Bounds().Dy()
	}
	n := 0
	for y := 0; y < a.Bounds().Dy(); y++ {
		for x := 0; x < a.Bounds().Dx(); x++ {
			i, j := a.PixOffset(x+a.Rect.Min.X, y+a.Rect.Min.Y), b.PixOffset(x+b.Rect.Min.X, y+b.Rect.Min.Y)
			if a.Pix[i] != b.Pix[j] || a.Pix[i+1] != b.Pix[j+1] || a.Pix[i+2] != b.Pix[j+2] {
				n++
			}
		}
	}
	return n
}
