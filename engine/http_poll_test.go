package engine

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
)

// The 2025-11-25 transport's polling, over real HTTP with a raw client: a
// POST stream starts with a priming event (an id, empty data); the server
// closes it in the middle of a long call (vm_wait_boot on a VM whose agent
// never answers, 5 s with a progress line every 2 s), announcing when to
// come back; the client comes back with GET + Last-Event-ID, as often as it
// is sent away, and gets every event once, the answer included. A request
// in a 2025-11-25 session that names an older revision or none (the
// conformance suite's POSTs say 2025-03-26) is served as the session's.
func TestHTTPPollsLongCalls(t *testing.T) {
	be := backendtest.New("")
	cfg := testConfig(t, t.TempDir())
	s := testServer(t, cfg, app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) { return fakeBench{be}, nil }})
	s.streamPoll = 300 * time.Millisecond // the call lasts 5 s: it is closed several times
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	for i, header := range []string{"2025-11-25", "2025-03-26", ""} {
		vmid := 101 + i
		be.AddVM(backends.VM{VMID: vmid, Name: fmt.Sprintf("tester-repro-p%d", i), Status: "running"})
		be.SetAgent(vmid, false)
		t.Run("header="+header, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			resp := mcpRequest(t, ctx, "POST", ts.URL, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
			session := resp.Header.Get("Mcp-Session-Id")
			resp.Body.Close()
			if session == "" {
				t.Fatal("no Mcp-Session-Id")
			}
			mcpRequest(t, ctx, "POST", ts.URL, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()

			resp = mcpRequest(t, ctx, "POST", ts.URL, session, fmt.Sprintf(
				`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"vm_wait_boot","arguments":{"vmid":%d,"timeout":5},"_meta":{"progressToken":"p1"}}}`, vmid),
				"Mcp-Protocol-Version", header)
			isAnswer := func(e sseEvent) bool { return strings.Contains(e.data, `"id":7`) }
			first := readEvents(t, bufio.NewReader(resp.Body), isAnswer)
			resp.Body.Close()
			if len(first) == 0 || first[0].id == "" || first[0].data != "" {
				t.Fatalf("the POST stream began %+v, want a priming event: an id, empty data", first)
			}
			last := first[len(first)-1]
			if isAnswer(last) {
				t.Fatalf("the POST stream carried the whole 5 s call, answer included: the server never closed it (%d events)", len(first))
			}
			if last.retry != sseRetry {
				t.Errorf("the POST stream ended with %+v, want an event announcing retry %s", last, sseRetry)
			}

			events, lastID, streams := first, "", 1
			for answered := false; !answered; streams++ {
				if len(events) > 200 {
					t.Fatalf("no answer in 200 events: %+v", events)
				}
				for _, e := range events {
					if e.id != "" {
						lastID = e.id
					}
				}
				resp := mcpRequest(t, ctx, "GET", ts.URL, session, "", "Last-Event-ID", lastID, "Accept", "text/event-stream", "Mcp-Protocol-Version", header)
				more := readEvents(t, bufio.NewReader(resp.Body), isAnswer)
				resp.Body.Close()
				events = append(events, more...)
				answered = len(more) > 0 && isAnswer(more[len(more)-1])
				if len(more) == 0 {
					events = append(events, sseEvent{name: "(nothing)"}) // bounds a server that sends nothing
				}
			}
			t.Logf("%d events over %d streams", len(events), streams)
			answer := events[len(events)-1]
			if !strings.Contains(answer.data, "not booted after 5 s") {
				t.Errorf("the answer is %q, want vm_wait_boot's timeout", answer.data)
			}
			seen, progress := map[string]bool{}, 0
			for _, e := range events {
				if e.id != "" && seen[e.id] {
					t.Errorf("event %s came twice", e.id)
				}
				seen[e.id] = true
				if strings.Contains(e.data, "notifications/progress") {
					progress++
				}
			}
			if progress == 0 {
				t.Errorf("no progress line reached the client: %+v", events)
			}
		})
	}
}

// The Go SDK's own client follows the polling: sent away in the middle of a
// 5 s call, it comes back each time and returns the answer.
func TestHTTPPollingGoClient(t *testing.T) {
	be := backendtest.New("")
	be.AddVM(backends.VM{VMID: 101, Name: "tester-repro-g", Status: "running"})
	be.SetAgent(101, false)
	cfg := testConfig(t, t.TempDir())
	s := testServer(t, cfg, app.Options{OpenBench: func(config.Bench, *slog.Logger) (app.Bench, error) { return fakeBench{be}, nil }})
	s.streamPoll = 300 * time.Millisecond
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	ctx := context.Background()
	var resumes, progress atomic.Int64
	transport := &mcp.StreamableClientTransport{
		Endpoint:   ts.URL + "/mcp",
		HTTPClient: &http.Client{Transport: resumeCounter{headerTransport{http.DefaultTransport, map[string]string{"Authorization": "Bearer tester-token-0123456789"}}, &resumes}},
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "go", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
	}).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != pollRevision {
		t.Fatalf("the Go client negotiated %s over HTTP, want %s", v, pollRevision)
	}
	params := &mcp.CallToolParams{Name: "vm_wait_boot", Arguments: map[string]any{"vmid": 101, "timeout": 5}}
	params.SetProgressToken("g1")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if text := resultText(res); !strings.Contains(text, "not booted after 5 s") {
		t.Errorf("vm_wait_boot = %q", text)
	}
	if resumes.Load() < 2 {
		t.Errorf("the client resumed the call's stream %d times: it was not closed mid-call", resumes.Load())
	}
	if progress.Load() == 0 {
		t.Error("no progress reached the client")
	}
}

// resumeCounter counts the GETs with a Last-Event-ID a client sends.
type resumeCounter struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c resumeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}
