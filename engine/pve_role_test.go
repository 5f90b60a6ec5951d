package engine

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/pve/pvetest"
)

// pveLists answers whether PVE's own VM list, as token sees it, shows vmid.
func (l *pveLab) pveLists(t *testing.T, token string, vmid int) bool {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: l.srv.CAPool}}}
	req, err := http.NewRequest("GET", l.srv.APIURL()+"/cluster/resources?type=vm", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+token)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc struct {
		Data []struct {
			VMID int    `json:"vmid"`
			Pool string `json:"pool"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Data {
		if r.Pool != "" {
			t.Fatalf("PVE showed pool %q to a token without Pool.Audit", r.Pool)
		}
		if r.VMID == vmid {
			return true
		}
	}
	return false
}

// TestPVEUnderTheRecommendedRole drives the tools over HTTP with tokens
// that hold exactly the README's role on their pools (no Pool.Audit), on a
// PVE whose list lags: the four ownership failures of issue 9, and every
// tool the role is meant to allow.
func TestPVEUnderTheRecommendedRole(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{Agent: true, Console: true, ResourceLag: time.Second})
	cfg := lab.config(t, "")
	s := lab.server(t, cfg)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	client := func(token string) *mcp.ClientSession {
		t.Helper()
		cs, err := httpClient(t, ts.URL, map[string]string{"X-PVE-Token": token})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	erin, fred := client(lab.erin), client(lab.fred)

	// 1. A fresh clone is listed as the caller's as soon as PVE lists it.
	vmid := lab.clone(t, erin, "one")
	id := strconv.Itoa(vmid)
	for deadline := time.Now().Add(30 * time.Second); !lab.pveLists(t, lab.erin, vmid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) { // PVE's own lag is a second
			t.Fatal("PVE never listed the clone")
		}
	}
	if out := lab.ok(t, erin, "vm_list_my_vms", nil); out != "owner erin: 1 VMs named erin-repro-*\n"+id+"\terin-repro-one\tpve1\tstopped\n" {
		t.Fatalf("vm_list_my_vms once PVE lists the clone = %q", out)
	}

	// 2. A second clone of the name answers the first, the caller's.
	lab.refuse(t, erin, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "one"}, "already exists as vmid "+id)

	// 3. vm_task_wait on the caller's own full clone while it runs (the
	// VM joins its pool only at the end of the task).
	lab.srv.SetTaskDuration("qmclone", 3*time.Second)
	out := lab.ok(t, erin, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "slow", "wait": 0.5})
	upid := upidOf(t, out)
	if out := lab.ok(t, erin, "vm_task_wait", map[string]any{"upid": upid, "timeout": 0.2}); !strings.HasPrefix(out, "still running after") {
		t.Fatalf("vm_task_wait on the caller's running clone = %q", out)
	}
	lab.refuse(t, fred, "vm_task_wait", map[string]any{"upid": upid, "timeout": 0.2}, "Permission check failed")
	if out := lab.ok(t, erin, "vm_task_wait", map[string]any{"upid": upid, "timeout": 20}); out != "done: OK" {
		t.Fatalf("vm_task_wait until the clone ends = %q", out)
	}
	lab.srv.SetTaskDuration("qmclone", 50*time.Millisecond)

	// 4. Another caller's refusals change nothing the first relies on.
	race := lab.clone(t, erin, "race")
	lab.refuse(t, fred, "vm_exec", map[string]any{"vmid": race, "command": "true"}, "not found")
	lab.refuse(t, fred, "vm_start", map[string]any{"vmid": race}, "not found")
	lab.refuse(t, erin, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "race"}, "already exists")
	named := 0
	for _, v := range lab.srv.VMIDs() {
		if vm, _ := lab.srv.VM(v); vm.Name == "erin-repro-race" {
			named++
		}
	}
	if named != 1 {
		t.Fatalf("%d VMs named erin-repro-race", named)
	}

	// What the role allows, tool by tool (the README's table).
	lab.ok(t, erin, "vm_start", map[string]any{"vmid": vmid})
	if out := lab.ok(t, erin, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 30}); !strings.HasPrefix(out, "booted") {
		t.Fatalf("vm_wait_boot = %q", out)
	}
	if out := lab.ok(t, erin, "vm_exec", map[string]any{"vmid": vmid, "command": "printf 'привет' | wc -c"}); out != "exit 0\n12\n" {
		t.Fatalf("vm_exec = %q", out)
	}
	dir := t.TempDir()
	for _, size := range []int{100, 50000} { // file-write, then exec + cat
		path := filepath.Join(dir, fmt.Sprintf("f%d", size))
		data := strings.Repeat("x", size)
		lab.ok(t, erin, "vm_file_write", map[string]any{"vmid": vmid, "path": path, "content_base64": base64.StdEncoding.EncodeToString([]byte(data))})
		out := lab.ok(t, erin, "vm_file_read", map[string]any{"vmid": vmid, "path": path, "max_bytes": 100})
		if !strings.HasPrefix(out, data[:100]) || size > 100 && !strings.Contains(out, fmt.Sprintf("truncated at 100 of %d bytes", size)) {
			t.Fatalf("vm_file_read of %d bytes = %q", size, out)
		}
	}
	lab.ok(t, erin, "ui_screenshot", map[string]any{"vmid": vmid})
	lab.ok(t, erin, "ui_key", map[string]any{"vmid": vmid, "key": "ret"})
	lab.ok(t, erin, "vm_snapshot", map[string]any{"vmid": vmid, "name": "s1"})
	lab.ok(t, erin, "vm_rollback", map[string]any{"vmid": vmid, "name": "s1"})
	lab.ok(t, erin, "vm_stop", map[string]any{"vmid": vmid})
	if out := lab.ok(t, erin, "iso_list", nil); !strings.Contains(out, labISO) {
		t.Fatalf("iso_list = %q", out)
	}
	out = lab.ok(t, erin, "vm_create_iso", map[string]any{"name": "inst", "iso": labISO, "disk_gb": 8})
	inst := atoi(t, vmidLine.FindStringSubmatch(out)[1])
	lab.ok(t, erin, "vm_disk_resize", map[string]any{"vmid": inst, "disk": "scsi0", "size_gb": 16})
	lab.ok(t, erin, "vm_disk_add", map[string]any{"vmid": inst, "size_gb": 4})
	lab.ok(t, erin, "vm_eject", map[string]any{"vmid": inst})
	for _, v := range []int{inst, vmid, race} {
		lab.ok(t, erin, "vm_destroy", map[string]any{"vmid": v, "confirm": true})
	}
	if out := lab.ok(t, fred, "vm_list_my_vms", nil); out != "owner fred: 0 VMs named fred-repro-*\n" {
		t.Fatalf("fred's VMs = %q", out)
	}
	lab.mu.Lock()
	log := lab.logBuf.String()
	lab.mu.Unlock()
	if strings.Contains(log, "rfb: reconnecting failed") {
		t.Errorf("the console of the stopped VM was redialled with warnings:\n%s", log)
	}
	lab.checkNoSecrets(t, cfg)
}
