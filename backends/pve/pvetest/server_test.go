package pvetest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/poligon/poligon/backends/rfb"
)

// client speaks to the server on the wire, the way any PVE client does.
type client struct {
	t     *testing.T
	s     *Server
	token string
	hc    *http.Client
}

func newClient(t *testing.T, s *Server, token string) *client {
	return &client{t: t, s: s, token: token, hc: &http.Client{Timeout: 20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CAPool}}}}
}

type answer struct {
	status int
	reason string
	doc    map[string]json.RawMessage
}

func (c *client) do(method, path string, body url.Values, jsonBody any) answer {
	c.t.Helper()
	var r io.Reader
	ct := ""
	switch {
	case body != nil:
		r, ct = strings.NewReader(body.Encode()), "application/x-www-form-urlencoded"
	case jsonBody != nil:
		b, _ := json.Marshal(jsonBody)
		r, ct = strings.NewReader(string(b)), "application/json"
	}
	req, err := http.NewRequest(method, c.s.APIURL()+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "PVEAPIToken="+c.token)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, reason: strings.TrimSpace(strings.TrimPrefix(res.Status, res.Status[:3]))}
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &a.doc); err != nil {
		c.t.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
	}
	return a
}

func (a answer) data(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.doc["data"], v); err != nil {
		t.Fatalf("data %s: %v", a.doc["data"], err)
	}
}

func newAdmin(t *testing.T, opts Options) (*Server, *client) {
	s := New(t, opts)
	s.AddPool("lab")
	s.AddTemplate(9000, "debian-12")
	tok := s.AddToken("alice@pve!t", Grant{Path: "/pool/lab", Privs: append(VMAdmin, PoolAudit...)},
		Grant{Path: "/vms/9000", Privs: TemplateUser}, Grant{Path: "/storage", Privs: DatastoreUser},
		Grant{Path: "/sdn/zones/localnetwork", Privs: SDNUser})
	return s, newClient(t, s, tok)
}

func TestEnvelopeErrorsAndAuth(t *testing.T) {
	s, c := newAdmin(t, Options{})
	var id string
	c.do("GET", "/cluster/nextid", nil, nil).data(t, &id)
	if id != "100" {
		t.Errorf("nextid = %q; want the string \"100\"", id)
	}

	a := newClient(t, s, "").do("GET", "/version", nil, nil)
	if a.status != 401 || a.reason != "No ticket" {
		t.Errorf("no token: %d %q", a.status, a.reason)
	}
	a = newClient(t, s, "alice@pve!t=wrong").do("GET", "/version", nil, nil)
	if a.status != 401 {
		t.Errorf("wrong secret: %d %q", a.status, a.reason)
	}

	a = c.do("POST", "/nodes/pve1/qemu/9000/status/start", nil, nil)
	if a.status != 403 || a.reason != "Permission check failed (/vms/9000, VM.PowerMgmt)" || string(a.doc["data"]) != "null" {
		t.Errorf("403: %d %q %s", a.status, a.reason, a.doc["data"])
	}
	var msg string
	_ = json.Unmarshal(a.doc["message"], &msg)
	if msg != "Permission check failed (/vms/9000, VM.PowerMgmt)\n" {
		t.Errorf("403 body message %q", msg)
	}

	a = c.do("POST", "/nodes/pve1/qemu/9000/clone", url.Values{"newid": {"abc"}}, nil)
	var params map[string]string
	_ = json.Unmarshal(a.doc["errors"], &params)
	if a.status != 400 || a.reason != "Parameter verification failed." || !strings.Contains(params["newid"], "integer") {
		t.Errorf("400: %d %q %v", a.status, a.reason, params)
	}

	a = c.do("GET", "/nodes/pve1/qemu/555/config", nil, nil)
	if a.status != 403 {
		t.Errorf("config of a VM outside the ACLs: %d %q", a.status, a.reason)
	}
	a = c.do("GET", "/nodes/pve1/bogus", nil, nil)
	if a.status != 501 {
		t.Errorf("unknown path: %d %q", a.status, a.reason)
	}
}

func TestCloneWithJSONAndFormBodies(t *testing.T) {
	s, c := newAdmin(t, Options{ResourceLag: time.Hour})
	var full, upid string
	c.do("POST", "/nodes/pve1/qemu/9000/clone", nil,
		map[string]any{"newid": 100, "name": "a-repro-1", "pool": "lab", "full": true}).data(t, &full)
	c.do("POST", "/nodes/pve1/qemu/9000/clone",
		url.Values{"newid": {"101"}, "name": {"a-repro-2"}, "pool": {"lab"}, "full": {"0"}}, nil).data(t, &upid)
	if !strings.HasPrefix(upid, "UPID:pve1:") || !strings.HasSuffix(upid, ":qmclone:9000:alice@pve!t:") {
		t.Errorf("UPID %q", upid)
	}
	// Like qemu-server, a clone joins its pool only when its task ends.
	for _, id := range []int{100, 101} {
		if vm, ok := s.VM(id); !ok || vm.Pool != "" || vm.Lock != "clone" {
			t.Errorf("vm %d right after the clone: %+v", id, vm)
		}
	}
	var rows []map[string]any
	c.do("GET", "/cluster/resources?type=vm", nil, nil).data(t, &rows)
	if len(rows) != 1 || rows[0]["vmid"] != 9000.0 {
		t.Errorf("resources with an hour of lag: %v", rows)
	}
	type pool struct {
		Members []map[string]any `json:"members"`
	}
	var members []pool
	c.do("GET", "/pools?poolid=lab", nil, nil).data(t, &members)
	if len(members) != 1 || len(members[0].Members) != 0 {
		t.Errorf("pool members during the clones: %+v", members)
	}
	waitTask(t, c, full)
	waitTask(t, c, upid)
	for _, id := range []int{100, 101} {
		if vm, ok := s.VM(id); !ok || vm.Pool != "lab" || vm.Lock != "" {
			t.Errorf("vm %d after the clone: %+v", id, vm)
		}
	}
	c.do("GET", "/pools?poolid=lab", nil, nil).data(t, &members)
	if len(members) != 1 || len(members[0].Members) != 2 {
		t.Errorf("pool members (not lagged): %+v", members)
	}
}

// waitTask polls a task's status until it stopped.
func waitTask(t *testing.T, c *client, upid string) {
	t.Helper()
	node := strings.Split(upid, ":")[1]
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st map[string]any
		c.do("GET", "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil, nil).data(t, &st)
		if st["status"] == "stopped" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still running", upid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// What a token without Pool.Audit sees of its own pool, as pve-manager and
// qemu-server answer it: no pool in /cluster/resources, the members through
// ?poolid= (not /pools/{id}), and a VM it is cloning not at all until the
// clone joined the pool.
func TestPoolsWithoutPoolAudit(t *testing.T) {
	s, admin := newAdmin(t, Options{})
	role := append(append([]string{"VM.Allocate", "VM.Audit", "VM.Clone", "VM.Console", "VM.PowerMgmt", "VM.Snapshot", "Datastore.AllocateSpace"},
		VMConfig...), GuestAgent...)
	c := newClient(t, s, s.AddToken("erin@pve!t", Grant{Path: "/pool/lab", Privs: role},
		Grant{Path: "/vms/9000", Privs: TemplateUser}, Grant{Path: "/sdn/zones/localnetwork/vmbr0", Privs: SDNUser}))
	s.SetTaskDuration("qmclone", time.Hour)
	clone := map[string]any{"newid": 100, "name": "e-1", "pool": "lab", "full": 1}
	// Datastore.AllocateSpace on the pool covers only the storages in it.
	if a := c.do("POST", "/nodes/pve1/qemu/9000/clone", nil, clone); a.status != 403 || a.reason != "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)" {
		t.Errorf("a clone onto a storage outside the pool: %d %q", a.status, a.reason)
	}
	s.AddPoolStorage("lab", "local-lvm")
	noBridge := newClient(t, s, s.AddToken("frank@pve!t", Grant{Path: "/pool/lab", Privs: role},
		Grant{Path: "/vms/9000", Privs: TemplateUser}))
	if a := noBridge.do("POST", "/nodes/pve1/qemu/9000/clone", nil, clone); a.status != 403 || a.reason != "Permission check failed (/sdn/zones/localnetwork/vmbr0, SDN.Use)" {
		t.Errorf("a clone without SDN.Use on its bridge: %d %q", a.status, a.reason)
	}
	var upid string
	if a := c.do("POST", "/nodes/pve1/qemu/9000/clone", nil, clone); a.status != 200 {
		t.Fatalf("clone: %d %q", a.status, a.reason)
	} else {
		a.data(t, &upid)
	}
	if a := c.do("GET", "/nodes/pve1/qemu/100/config", nil, nil); a.status != 403 {
		t.Errorf("the cloning token reads the config of its clone in progress: %d", a.status)
	}
	var task map[string]any
	a := c.do("GET", "/nodes/pve1/tasks/"+url.PathEscape(upid)+"/status", nil, nil)
	a.data(t, &task)
	if task["status"] != "running" {
		t.Errorf("its own clone task %q: %v %d %q", upid, task, a.status, a.reason)
	}
	s.AddVM(VM{VMID: 150, Name: "e-2", Pool: "lab"})
	var rows []map[string]any
	c.do("GET", "/cluster/resources?type=vm", nil, nil).data(t, &rows)
	for _, r := range rows {
		if r["vmid"] == 150.0 && r["pool"] != nil {
			t.Errorf("a row shows the pool without Pool.Audit: %v", r)
		}
	}
	// With Pool.Audit the row shows it; the clone in progress is in no
	// pool yet, so not even the pool's admin sees it.
	admin.do("GET", "/cluster/resources?type=vm", nil, nil).data(t, &rows)
	if len(rows) != 2 || rows[0]["vmid"] != 150.0 || rows[0]["pool"] != "lab" || rows[1]["vmid"] != 9000.0 {
		t.Errorf("rows with Pool.Audit: %v", rows)
	}
	var members []struct {
		Members []map[string]any `json:"members"`
	}
	c.do("GET", "/pools?poolid=lab", nil, nil).data(t, &members)
	if len(members) != 1 || len(members[0].Members) != 1 || members[0].Members[0]["vmid"] != 150.0 {
		t.Errorf("?poolid= without Pool.Audit: %+v", members)
	}
	if a := c.do("GET", "/pools/lab", nil, nil); a.status != 403 {
		t.Errorf("/pools/lab without Pool.Audit: %d", a.status)
	}

	old := New(t, Options{NoPoolQuery: true})
	old.AddPool("lab")
	oc := newClient(t, old, old.AddToken("erin@pve!t", Grant{Path: "/pool/lab", Privs: role}))
	if a := oc.do("GET", "/pools?poolid=lab", nil, nil); a.status != 400 {
		t.Errorf("?poolid= before PVE 8.1: %d", a.status)
	}
}

func TestPermissionsWithAndWithoutPath(t *testing.T) {
	s := New(t, Options{})
	s.AddPool("lab")
	tok := s.AddToken("carol@pve!t", Grant{Path: "/pool/lab", Privs: VMAdmin})
	c := newClient(t, s, tok)
	var all map[string]map[string]int
	c.do("GET", "/access/permissions", nil, nil).data(t, &all)
	if all["/pool/lab"]["VM.Allocate"] != 1 || all["/vms"] == nil {
		t.Errorf("permissions without a path: %v", all)
	}
	var one map[string]map[string]int
	c.do("GET", "/access/permissions?path=/pool/lab", nil, nil).data(t, &one)
	if len(one) != 1 || one["/pool/lab"]["VM.Allocate"] != 1 {
		t.Errorf("permissions of /pool/lab: %v", one)
	}
	var pools []any
	c.do("GET", "/pools", nil, nil).data(t, &pools)
	if len(pools) != 0 {
		t.Errorf("GET /pools without Pool.Audit: %v", pools)
	}
	if a := c.do("GET", "/pools/lab", nil, nil); a.status != 403 {
		t.Errorf("GET /pools/lab without Pool.Audit: %d", a.status)
	}
}

func TestAgentLimitsAndShapes(t *testing.T) {
	s, c := newAdmin(t, Options{Agent: true})
	s.AddVM(VM{VMID: 150, Name: "a-repro-x", Pool: "lab", Running: true})
	var pid struct {
		PID int `json:"pid"`
	}
	c.do("POST", "/nodes/pve1/qemu/150/agent/exec", nil, map[string]any{"command": []string{"printf", "é"}}).data(t, &pid)
	if pid.PID <= 0 {
		t.Fatalf("exec answered %+v", pid)
	}
	var st map[string]any
	for {
		c.do("GET", "/nodes/pve1/qemu/150/agent/exec-status?pid="+strconv.Itoa(pid.PID), nil, nil).data(t, &st)
		if st["exited"] == 1.0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// printf got "é" double-encoded (PVE's mangling), and its two UTF-8
	// bytes come back as two latin-1 characters each: four characters.
	if out := st["out-data"].(string); len([]rune(out)) != 4 || st["exitcode"] != 0.0 {
		t.Errorf("exec-status: %v", st)
	}
	a := c.do("POST", "/nodes/pve1/qemu/150/agent/file-write", nil,
		map[string]any{"file": "/tmp/x", "content": strings.Repeat("A", 61441), "encode": 0})
	var params map[string]string
	_ = json.Unmarshal(a.doc["errors"], &params)
	if a.status != 400 || !strings.Contains(params["content"], "61440") {
		t.Errorf("file-write above 61440 characters: %d %v", a.status, params)
	}
	a = c.do("POST", "/nodes/pve1/qemu/150/agent/exec", nil, map[string]any{"command": []string{"cat"}, "input-data": "✓"})
	if a.status != 500 || !strings.HasPrefix(a.reason, "Wide character") {
		t.Errorf("input-data above U+00FF: %d %q", a.status, a.reason)
	}
	s.SetAgentDown(150, true)
	if a := c.do("POST", "/nodes/pve1/qemu/150/agent/ping", nil, nil); a.status != 500 || a.reason != "QEMU guest agent is not running" {
		t.Errorf("agent down: %d %q", a.status, a.reason)
	}
}

// wsDial opens a console websocket as a PVE client would.
func (c *client) wsDial(vmid int, ticket, port string) (*websocket.Conn, *http.Response, error) {
	u := "wss" + strings.TrimPrefix(c.s.APIURL(), "https") + "/nodes/pve1/qemu/" + strconv.Itoa(vmid) +
		"/vncwebsocket?" + url.Values{"port": {port}, "vncticket": {ticket}}.Encode()
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: c.s.CAPool}, Subprotocols: []string{"binary"}}
	return d.Dial(u, http.Header{"Authorization": {"PVEAPIToken=" + c.token}})
}

type wsNetConn struct {
	*websocket.Conn
	r io.Reader
}

func (w *wsNetConn) Read(p []byte) (int, error) {
	for {
		if w.r == nil {
			_, r, err := w.NextReader()
			if err != nil {
				return 0, err
			}
			w.r = r
		}
		n, err := w.r.Read(p)
		if err == io.EOF {
			w.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (w *wsNetConn) Write(p []byte) (int, error) {
	return len(p), w.WriteMessage(websocket.BinaryMessage, p)
}

func (w *wsNetConn) SetDeadline(t time.Time) error { return w.NetConn().SetDeadline(t) }

func TestConsoleTicketsAndVNCAuth(t *testing.T) {
	s, c := newAdmin(t, Options{Console: true})
	s.AddVM(VM{VMID: 150, Name: "a-repro-x", Pool: "lab", Running: true})
	proxy := func() (ticket, port, password string) {
		var p struct {
			Ticket, Port, Password string
		}
		c.do("POST", "/nodes/pve1/qemu/150/vncproxy", url.Values{"websocket": {"1"}, "generate-password": {"1"}}, nil).data(t, &p)
		return p.Ticket, p.Port, p.Password
	}
	ticket, port, password := proxy()
	if password != s.VNCPassword() || port == "" {
		t.Fatalf("vncproxy answered port %q password set %v", port, password != "")
	}
	// A ticket of another token is refused.
	other := newClient(t, s, s.AddToken("bob@pve!t", Grant{Path: "/pool/lab", Privs: VMAdmin}))
	if _, res, err := other.wsDial(150, ticket, port); err == nil || res == nil || res.StatusCode != 401 {
		t.Errorf("bob with alice's ticket: %v %v", res, err)
	}
	// The right password over the websocket reaches QEMU's VNC auth.
	connect := func(ticket, port, password string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cl, err := rfb.Connect(ctx, rfb.Config{Password: password, Encodings: []int32{rfb.EncodingZRLE},
			Dial: func(context.Context) (net.Conn, error) {
				ws, _, err := c.wsDial(150, ticket, port)
				if err != nil {
					return nil, err
				}
				return &wsNetConn{Conn: ws}, nil
			}})
		if err == nil {
			cl.Close()
		}
		return err
	}
	if err := connect(ticket, port, password); err != nil {
		t.Fatalf("RFB over the websocket: %v", err)
	}
	if _, res, err := c.wsDial(150, ticket, port); err == nil || res.StatusCode != 500 {
		t.Errorf("a ticket used twice: %v %v", res, err)
	}
	ticket, port, _ = proxy()
	if err := connect(ticket, port, "wrong"); !errors.Is(err, rfb.ErrAuth) {
		t.Errorf("a wrong VNC password: %v; want rfb.ErrAuth", err)
	}
	s.ExpireNextTickets(1)
	ticket, port, _ = proxy()
	if _, res, err := c.wsDial(150, ticket, port); err == nil || res.StatusCode != 401 {
		t.Errorf("an expired ticket: %v %v", res, err)
	}
}

// A full clone copies its source's disks: its task runs for a time that
// grows with them, the new VM locked "clone" until it ends OK; a linked
// clone copies nothing and ends at once.
func TestFullCloneCopyTime(t *testing.T) {
	// At 1 MiB/s the 8 GB template takes hours: "still copying" is a fact.
	s, c := newAdmin(t, Options{CopyRate: 1 << 20})
	root := newClient(t, s, s.AddToken("root@pam!t", Grant{Path: "/", Privs: VMAdmin}))
	var full, linked string
	c.do("POST", "/nodes/pve1/qemu/9000/clone", nil, map[string]any{"newid": 100, "name": "full", "pool": "lab", "full": 1}).data(t, &full)
	c.do("POST", "/nodes/pve1/qemu/9000/clone", nil, map[string]any{"newid": 101, "name": "linked", "pool": "lab", "full": 0}).data(t, &linked)
	waitTask(t, c, linked)
	var st map[string]any
	c.do("GET", "/nodes/pve1/tasks/"+url.PathEscape(full)+"/status", nil, nil).data(t, &st)
	if st["status"] != "running" || st["exitstatus"] != nil {
		t.Errorf("the full clone's task once the linked one ended: %v", st)
	}
	var cur, cfg map[string]any
	root.do("GET", "/nodes/pve1/qemu/100/status/current", nil, nil).data(t, &cur)
	root.do("GET", "/nodes/pve1/qemu/100/config", nil, nil).data(t, &cfg)
	if cur["lock"] != "clone" || cur["status"] != "stopped" || cfg["lock"] != "clone" {
		t.Errorf("the VM being copied: status %v, config lock %v", cur, cfg["lock"])
	}
	if a := root.do("POST", "/nodes/pve1/qemu/100/status/start", nil, nil); a.status != 500 || a.reason != "VM is locked (clone)" {
		t.Errorf("starting the VM being copied: %d %q", a.status, a.reason)
	}
	if vm, _ := s.VM(101); vm.Lock != "" || vm.Pool != "lab" {
		t.Errorf("the linked clone after its task: %+v", vm)
	}

	// At the default rate: the time grows with the disks, then stopped, OK.
	s, c = newAdmin(t, Options{})
	s.AddVM(VM{VMID: 9001, Name: "big", Template: true, Config: map[string]string{"scsi1": "local-lvm:base-9001-disk-1,size=24G"}})
	s.Grant("alice@pve!t", Grant{Path: "/vms/9001", Privs: TemplateUser})
	want := map[string]time.Duration{}
	for _, cl := range []struct {
		src, newid int
		disks      int64 // GiB
	}{{9000, 100, 8}, {9001, 101, 32}} {
		var upid string
		c.do("POST", "/nodes/pve1/qemu/"+strconv.Itoa(cl.src)+"/clone", nil, map[string]any{"newid": cl.newid, "name": "c" + strconv.Itoa(cl.newid), "pool": "lab", "full": 1}).data(t, &upid)
		want[upid] = 50*time.Millisecond + time.Duration(cl.disks<<30*int64(time.Second)/(64<<30))
		waitTask(t, c, upid)
		c.do("GET", "/nodes/pve1/tasks/"+url.PathEscape(upid)+"/status", nil, nil).data(t, &st)
		if st["exitstatus"] != "OK" {
			t.Errorf("clone %s ended %v", upid, st)
		}
	}
	tasks := s.Tasks("qmclone")
	if len(tasks) != 2 || tasks[0].VMID != 100 || tasks[1].VMID != 101 || tasks[1].ID != "9001" {
		t.Fatalf("clone tasks %+v", tasks)
	}
	for _, tk := range tasks {
		if took := tk.Ended.Sub(tk.Started); took < want[tk.UPID] || tk.Exit != "OK" {
			t.Errorf("the full clone into %d took %s (%s); want at least %s", tk.VMID, took, tk.Exit, want[tk.UPID])
		}
	}
}

// GateTasks holds tasks until n of them run at once.
func TestGateTasks(t *testing.T) {
	s, c := newAdmin(t, Options{})
	s.GateTasks("qmclone", 2)
	var first, second string
	c.do("POST", "/nodes/pve1/qemu/9000/clone", nil, map[string]any{"newid": 100, "name": "a", "pool": "lab", "full": 0}).data(t, &first)
	time.Sleep(200 * time.Millisecond) // longer than the task would run: it must not end
	if tk := s.Tasks("qmclone"); len(tk) != 1 || !tk[0].Ended.IsZero() {
		t.Fatalf("a gated task alone: %+v", tk)
	}
	c.do("POST", "/nodes/pve1/qemu/9000/clone", nil, map[string]any{"newid": 101, "name": "b", "pool": "lab", "full": 0}).data(t, &second)
	waitTask(t, c, first)
	waitTask(t, c, second)
	tk := s.Tasks("qmclone")
	if !tk[1].Started.Before(tk[0].Ended) {
		t.Errorf("the gated tasks did not overlap: %+v", tk)
	}
}
