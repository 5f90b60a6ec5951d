package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/testvm"
)

// headerTransport adds headers to every request of an MCP client.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// httpClient connects an MCP client over real HTTP with the given headers.
func httpClient(t *testing.T, url string, headers map[string]string) (*mcp.ClientSession, error) {
	t.Helper()
	transport := &mcp.StreamableClientTransport{
		Endpoint:   url + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{http.DefaultTransport, headers}},
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, nil).Connect(context.Background(), transport, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func get(t *testing.T, url, host string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestHTTP(t *testing.T) {
	cfg := testConfig(t, testvm.ShortTempDir(t))
	cfg.Server.AllowedHosts = []string{"poligon.example.org"}
	s := testServer(t, cfg, app.Options{})
	ts := httptest.NewServer(s.Handler())
	// Closed after the clients (cleanups run last-in first-out): an open
	// MCP stream would keep Close waiting.
	t.Cleanup(ts.Close)

	if code, body := get(t, ts.URL+"/healthz", "", nil); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	// /readyz shows the KVM decision (the operator's first question when
	// VMs are slow) and the toolsets offered, and no host path.
	if code, body := get(t, ts.URL+"/readyz", "", nil); !strings.Contains(body, `"problems"`) || code != 200 && code != 503 ||
		!strings.Contains(body, `"accel":"`) || strings.Contains(body, s.cfg.DataDir) ||
		!strings.Contains(body, `"toolsets":["vm","ui","iso","stand","trace","dataset","scripts"]`) {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	for _, host := range []string{"evil.example.com", "evil.example.com:8811", "10.1.2.3"} {
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/mcp"} {
			if code, _ := get(t, ts.URL+path, host, nil); code != http.StatusMisdirectedRequest {
				t.Errorf("Host %s %s: status %d, want 421", host, path, code)
			}
		}
	}
	if code, _ := get(t, ts.URL+"/healthz", "poligon.example.org:8811", nil); code != 200 {
		t.Errorf("an allowed host got %d", code)
	}
	if code, _ := get(t, ts.URL+"/healthz", "[::1]:8811", nil); code != 200 {
		t.Errorf("loopback v6 got %d", code)
	}

	// No anonymous calls, and a wrong credential gets nowhere.
	if code, body := get(t, ts.URL+"/mcp", "", nil); code != 401 || !strings.Contains(body, "no credential") {
		t.Errorf("/mcp without credential = %d %s", code, body)
	}
	if _, err := httpClient(t, ts.URL, nil); err == nil {
		t.Error("an MCP client without credential connected")
	}
	if _, err := httpClient(t, ts.URL, map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}); err == nil {
		t.Error("an MCP client with a wrong token connected")
	}

	cs, err := httpClient(t, ts.URL, map[string]string{"Authorization": "Bearer tester-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustOK(t, cs, "vm_list_my_vms", nil); !strings.HasPrefix(out, "owner tester:") {
		t.Fatalf("vm_list_my_vms over HTTP = %q", out)
	}
	other, err := httpClient(t, ts.URL, map[string]string{"Authorization": "Bearer other-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	if out := mustOK(t, other, "vm_list_my_vms", nil); !strings.HasPrefix(out, "owner other:") {
		t.Fatalf("a second token's owner = %q", out)
	}
	// A session answers only to the credentials that opened it: another
	// caller who learns its id can neither read it nor end it.
	for _, method := range []string{"GET", "DELETE", "POST"} {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"vm_list_my_vms","arguments":{}}}`)
		}
		req, _ := http.NewRequest(method, ts.URL+"/mcp", body)
		req.Header.Set("Authorization", "Bearer other-token-0123456789")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(got), "other credentials") {
			t.Errorf("%s on another's session = %d %s", method, resp.StatusCode, got)
		}
	}
	if out := mustOK(t, cs, "vm_list_my_vms", nil); !strings.HasPrefix(out, "owner tester:") {
		t.Fatalf("the session after another's attempts = %q", out)
	}

	pveOnly, err := httpClient(t, ts.URL, map[string]string{"X-PVE-Token": "root@pam!t=0000-1111"})
	if err != nil {
		t.Fatal(err)
	}
	out := mustRefuse(t, pveOnly, "vm_list_my_vms", nil, "needs a bearer token")
	if strings.Contains(out, "0000-1111") {
		t.Fatalf("a token secret reached an answer: %q", out)
	}

	if code, body := get(t, ts.URL+"/metrics", "", nil); code != 200 || !strings.Contains(body, `poligon_tool_calls_total{outcome="ok",tool="vm_list_my_vms"} 3`) {
		t.Fatalf("/metrics = %d, missing the call counter:\n%s", code, body)
	}
	// The calls above are trace steps, counted once the writer stored them.
	eventually(t, "the trace's counters in /metrics", func() bool {
		_, body := get(t, ts.URL+"/metrics", "", nil)
		return strings.Contains(body, "poligon_trace_dropped_total 0") && !strings.Contains(body, "poligon_trace_steps_total 0") &&
			strings.Contains(body, `poligon_trace_bytes{part="steps"}`)
	})
}

// sseEvent is one server-sent event as the wire carries it.
type sseEvent struct{ id, name, data, retry string }

// readEvents reads server-sent events from r until stop says so or the
// stream ends.
func readEvents(t *testing.T, r *bufio.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line == "" && (ev != sseEvent{}) {
			out = append(out, ev)
			if stop(ev) {
				return out
			}
			ev = sseEvent{}
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			v = strings.TrimSpace(v)
			switch k {
			case "id":
				ev.id = v
			case "event":
				ev.name = v
			case "data":
				ev.data = v
			case "retry":
				ev.retry = v
			}
		}
		if err != nil {
			return out
		}
	}
}

// mcpRequest sends one raw Streamable HTTP request as a 2025-11-25 client.
func mcpRequest(t *testing.T, ctx context.Context, method, url, session, body string, headers ...string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url+"/mcp", rd)
	req.Header.Set("Authorization", "Bearer tester-token-0123456789")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s", method, body, resp.StatusCode, b)
	}
	return resp
}

// A client that loses its POST stream in the middle of a long call (here
// vm_wait_boot on a VM whose agent never answers: a progress line every
// 2 s) reconnects with GET + Last-Event-ID and gets the rest, the answer
// included, though the call ended while it was away.
func TestHTTPResumeAfterDroppedStream(t *testing.T) {
	be := backendtest.New("")
	be.AddVM(backends.VM{VMID: 101, Name: "tester-repro-r", Status: "running"})
	be.SetAgent(101, false)
	cfg := testConfig(t, t.TempDir())
	s := testServer(t, cfg, app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) { return fakeBench{be}, nil }})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	ctx := context.Background()

	resp := mcpRequest(t, ctx, "POST", ts.URL, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if session == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	mcpRequest(t, ctx, "POST", ts.URL, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()

	callCtx, drop := context.WithCancel(ctx)
	resp = mcpRequest(t, callCtx, "POST", ts.URL, session,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"vm_wait_boot","arguments":{"vmid":101,"timeout":5},"_meta":{"progressToken":"p1"}}}`)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("the call answered %s, want an event stream", ct)
	}
	first := readEvents(t, bufio.NewReader(resp.Body), func(e sseEvent) bool { return strings.Contains(e.data, "notifications/progress") })
	drop() // the stream is lost after the first progress line
	resp.Body.Close()
	if len(first) != 2 || first[0].name != "prime" || first[0].id == "" || first[0].data != "" || first[0].retry != sseRetry {
		t.Fatalf("the POST stream began %+v, want a priming event with an id and retry %s, then the progress line", first, sseRetry)
	}
	last := first[1]
	if last.id == "" || !strings.Contains(last.data, `"progressToken":"p1"`) {
		t.Fatalf("the progress event %+v has no id or token", last)
	}

	// The call goes on without its stream and ends while nobody listens.
	waitCtx, cancel := context.WithTimeout(ctx, backendtest.HangGuard)
	defer cancel()
	if err := s.Wait(waitCtx); err != nil {
		t.Fatalf("the call did not end: %v", err)
	}

	resp = mcpRequest(t, ctx, "GET", ts.URL, session, "", "Last-Event-ID", last.id, "Accept", "text/event-stream")
	defer resp.Body.Close()
	rest := readEvents(t, bufio.NewReader(resp.Body), func(e sseEvent) bool { return strings.Contains(e.data, `"id":7`) })
	if len(rest) == 0 || !strings.Contains(rest[len(rest)-1].data, `"id":7`) || !strings.Contains(rest[len(rest)-1].data, "not booted after 5 s") {
		t.Fatalf("the resumed stream carried %+v, want the rest and the answer to call 7", rest)
	}
	progress := 0
	for _, e := range rest {
		if e.id == last.id || e.id == first[0].id {
			t.Errorf("event %s came again after Last-Event-ID %s", e.id, last.id)
		}
		if strings.Contains(e.data, "notifications/progress") {
			progress++
		}
	}
	if progress == 0 {
		t.Errorf("the resumed stream has no progress line of the ones sent while away: %+v", rest)
	}
}

// The event store keeps at most eventStoreBytes (plus the one event being
// added, which it always keeps) however much the streams send: the oldest
// events go first.
func TestEventStoreBounded(t *testing.T) {
	st := newEventStore()
	if st.MaxBytes() != eventStoreBytes {
		t.Fatalf("MaxBytes = %d, want %d", st.MaxBytes(), eventStoreBytes)
	}
	ctx := context.Background()
	const event = 64 << 10 // a screenshot answer's order of size
	const sessions, streams, perStream = 8, 4, 3 * eventStoreBytes / (8 * 4 * event)
	data := bytes.Repeat([]byte("x"), event)
	for se := range sessions {
		for sr := range streams {
			st.Open(ctx, strconv.Itoa(se), strconv.Itoa(sr))
		}
	}
	for i := range perStream {
		for se := range sessions {
			for sr := range streams {
				st.Append(ctx, strconv.Itoa(se), strconv.Itoa(sr), data[:event-i%7])
			}
		}
	}
	// What each stream still holds: its events after the first index
	// that has not been purged.
	kept := 0
	for se := range sessions {
		for sr := range streams {
			for idx := -1; idx < perStream; idx++ {
				n, purged := 0, false
				for d, err := range st.After(ctx, strconv.Itoa(se), strconv.Itoa(sr), idx) {
					if errors.Is(err, mcp.ErrEventsPurged) {
						purged = true
						break
					}
					n += len(d)
				}
				if !purged {
					kept += n
					break
				}
			}
		}
	}
	if kept > eventStoreBytes+event || kept < eventStoreBytes/2 {
		t.Fatalf("the store keeps %d bytes after %d were sent, want at most %d (+ one event)", kept, sessions*streams*perStream*event, eventStoreBytes)
	}
	for _, err := range st.After(ctx, "0", "0", -1) {
		if !errors.Is(err, mcp.ErrEventsPurged) {
			t.Fatalf("the oldest event is still kept (err %v)", err)
		}
		break
	}
}
