package engine

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/pve/pvetest"
	"github.com/poligon/poligon/internal/audit"
)

// TestPVEOverHTTP checks who a pve bench serves over HTTP: each request's
// X-PVE-Token decides the owner and the pools, and the bench's own token
// (PVE_TOKEN) is never used for an HTTP caller; in memory (stdio's trust)
// it is.
func TestPVEOverHTTP(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{})
	cfg := lab.config(t, lab.alice) // PVE_TOKEN: the stdio token
	s := lab.server(t, cfg)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close) // after the clients: an open MCP stream keeps Close waiting

	client := func(headers map[string]string) *mcp.ClientSession {
		t.Helper()
		cs, err := httpClient(t, ts.URL, headers)
		if err != nil {
			t.Fatalf("MCP client with %v headers: %v", len(headers), err)
		}
		return cs
	}
	const wrongSecret = "00000000-dead-beef-0000-000000000000"
	alice := client(map[string]string{"X-PVE-Token": lab.alice})
	carol := client(map[string]string{"X-PVE-Token": lab.carol})
	bearerOnly := client(map[string]string{"Authorization": "Bearer tester-token-0123456789"})
	both := client(map[string]string{"Authorization": "Bearer tester-token-0123456789", "X-PVE-Token": lab.carol})
	wrong := client(map[string]string{"X-PVE-Token": labAliceTokenID + "=" + wrongSecret})
	noPool := client(map[string]string{"X-PVE-Token": lab.bob})
	malformed := client(map[string]string{"X-PVE-Token": "alice-" + wrongSecret})
	stdio := connect(t, s)

	if code, body := get(t, ts.URL+"/mcp", "", nil); code != 401 || !strings.Contains(body, "X-PVE-Token") {
		t.Errorf("/mcp without credential = %d %s; want 401 naming X-PVE-Token", code, body)
	}

	// The stdio caller gets the bench's token; an HTTP caller never does.
	if out := lab.ok(t, stdio, "vm_list_my_vms", nil); !strings.HasPrefix(out, "owner alice:") {
		t.Fatalf("in memory, PVE_TOKEN makes the owner: %q", out)
	}
	lab.refuse(t, bearerOnly, "vm_list_my_vms", map[string]any{"bench": "pve"}, "bench pve needs a Proxmox API token")
	lab.refuse(t, bearerOnly, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "sneak"}, "hint: send X-PVE-Token")
	if out := lab.ok(t, bearerOnly, "vm_list_my_vms", map[string]any{"bench": "local"}); !strings.HasPrefix(out, "owner tester:") {
		t.Fatalf("the bearer token on the local bench: %q", out)
	}

	// Each X-PVE-Token is its own owner with its own pools.
	vmid := lab.clone(t, alice, "web")
	if vm := lab.vmState(t, vmid); vm.Pool != "alice" || vm.Name != "alice-repro-web" {
		t.Fatalf("alice's clone over HTTP is %+v", vm)
	}
	if out := lab.ok(t, carol, "vm_list_my_vms", map[string]any{"bench": "pve"}); out != "owner carol: 0 VMs named carol-repro-*\n" {
		t.Fatalf("carol's VMs = %q", out)
	}
	lab.refuse(t, carol, "vm_start", map[string]any{"vmid": vmid}, "not found")
	lab.refuse(t, carol, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true}, "not found")
	carolVM := lab.clone(t, carol, "web")
	if vm := lab.vmState(t, carolVM); vm.Pool != "carol" || vm.Name != "carol-repro-web" {
		t.Fatalf("carol's clone of the same name is %+v", vm)
	}
	// A bearer token next to X-PVE-Token: the PVE token still decides.
	if out := lab.ok(t, both, "vm_list_my_vms", nil); !strings.HasPrefix(out, "owner carol: 1 VMs") {
		t.Fatalf("bearer + X-PVE-Token = %q", out)
	}
	lab.refuse(t, both, "vm_exec", map[string]any{"vmid": vmid, "command": "true"}, "not found")
	lab.ok(t, alice, "vm_start", map[string]any{"vmid": vmid})
	if vm := lab.vmState(t, vmid); vm.Status != "running" {
		t.Fatalf("alice started her VM over HTTP, it is %s", vm.Status)
	}

	// Credentials PVE refuses, or that name no pool. A refused token is
	// not sent again at once (PVE makes every 401 wait 3 s), and the
	// answer says so.
	lab.refuse(t, wrong, "vm_list_my_vms", nil, "401")
	sent := lab.srv.Hits("", "")
	out := lab.refuse(t, wrong, "vm_start", map[string]any{"vmid": vmid}, "invalid token value")
	if !strings.Contains(out, "not sent: PVE refused token "+labAliceTokenID) {
		t.Errorf("the second call with a refused token = %q; want it to say it was not sent", out)
	}
	if n := lab.srv.Hits("", "") - sent; n != 0 {
		t.Errorf("the refused token was sent %d more times", n)
	}
	lab.refuse(t, noPool, "vm_list_my_vms", nil, "no pool with VM.Allocate")
	lab.refuse(t, noPool, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "x"}, "no pool with VM.Allocate")
	lab.refuse(t, malformed, "vm_list_templates", nil, "USER@REALM!TOKENID=SECRET")

	lab.ok(t, alice, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true})
	lab.ok(t, carol, "vm_destroy", map[string]any{"vmid": carolVM, "confirm": true})

	// The audit log names each HTTP caller by token id, never the secret.
	raw, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	callers := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var rec audit.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if rec.Transport == "http" && rec.Bench == "pve" {
			callers[rec.Caller] = true
		}
	}
	for _, want := range []string{labAliceTokenID, "carol@pve!repro", "bob@pve!ro", "(a malformed PVE token)"} {
		if !callers[want] {
			t.Errorf("no HTTP audit record with caller %q (have %v)", want, callers)
		}
	}
	lab.checkNoSecrets(t, cfg, wrongSecret)
}
