package engine

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	s, err := New(cfg, Options{OpenBench: openBench})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ts := httptest.NewServer(s.Handler())
	// Closed after the clients (cleanups run last-in first-out): an open
	// MCP stream would keep Close waiting.
	t.Cleanup(ts.Close)

	if code, body := get(t, ts.URL+"/healthz", "", nil); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	// /readyz shows the KVM decision (the operator's first question when
	// VMs are slow), and no host path.
	if code, body := get(t, ts.URL+"/readyz", "", nil); !strings.Contains(body, `"problems"`) || code != 200 && code != 503 ||
		!strings.Contains(body, `"accel":"`) || strings.Contains(body, s.cfg.DataDir) {
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
}
