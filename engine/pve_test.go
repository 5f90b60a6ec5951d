package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/pve/pvetest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/testvm"
)

// The MCP tool suite against a Proxmox bench: the built-in tools, called
// through a real MCP client (in memory with stdio's trust, and over HTTP),
// on a `pve` bench backed by pvetest, a PVE API server over TLS whose guest
// agent endpoints forward to a real qemu-ga on this host and whose console
// is a real QEMU's VNC server behind a websocket.

// Fixtures of the lab.
const (
	labTemplate     = 9000 // debian-12-x86-64 on pve1 (and 9010 of the same name on pve2)
	labForeignHid   = 200  // bob-repro-x in pool bob: alice cannot even see it
	labForeignName  = 201  // bob-repro-y in alice's pool: not alice's by name
	labForeignPool  = 202  // alice-repro-z in pool bob: alice's name, not her pool
	labISO          = "local:iso/debian-12.7.0-amd64-netinst.iso"
	labISOSize      = 661651456
	labAliceTokenID = "alice@pve!repro"
)

// pveLab is a pvetest cluster laid out for the engine's tests: two nodes,
// templates, ISOs, VMs of other owners, and tokens.
type pveLab struct {
	srv   *pvetest.Server
	alice string // PVEVMAdmin on pool alice, clone on the templates
	carol string // the same on pool carol
	bob   string // templates only: no pool with VM.Allocate
	dave  string // pool dave without VM.PowerMgmt
	erin  string // the README's recommended role on pool erin: no Pool.Audit
	fred  string // the same on pool fred

	mu      sync.Mutex
	answers []string // every tool answer's text, for the secret check
	logBuf  bytes.Buffer
}

func newPVELab(t *testing.T, opts pvetest.Options) *pveLab {
	t.Helper()
	opts.Nodes = []string{"pve1", "pve2"}
	srv := pvetest.New(t, opts)
	for _, p := range []string{"alice", "bob", "carol", "dave"} {
		srv.AddPool(p)
	}
	srv.AddTemplate(labTemplate, "debian-12-x86-64")
	srv.AddVM(pvetest.VM{VMID: 9010, Name: "debian-12-x86-64", Node: "pve2", Template: true})
	srv.AddTemplate(9001, "debian-13-x86-64")
	srv.AddTemplate(9002, "p11-workstation-11.1-x86-64")
	srv.AddTemplate(9003, "scratch-not-for-clone")
	srv.AddISO(labISO, labISOSize)
	srv.AddISO("local:iso/alt-p11-x86_64.iso", 4096)
	srv.AddVM(pvetest.VM{VMID: labForeignHid, Name: "bob-repro-x", Pool: "bob"})
	srv.AddVM(pvetest.VM{VMID: labForeignName, Name: "bob-repro-y", Pool: "alice"})
	srv.AddVM(pvetest.VM{VMID: labForeignPool, Name: "alice-repro-z", Pool: "bob"})

	templates := []pvetest.Grant{
		{Path: "/storage", Privs: pvetest.DatastoreUser},
		{Path: "/sdn/zones/localnetwork", Privs: pvetest.SDNUser},
	}
	for _, id := range []int{9000, 9001, 9002, 9003, 9010} {
		templates = append(templates, pvetest.Grant{Path: fmt.Sprintf("/vms/%d", id), Privs: pvetest.TemplateUser})
	}
	admin := func(pool string, privs []string) []pvetest.Grant {
		g := pvetest.Grant{Path: "/pool/" + pool, Privs: append(append(append([]string{}, privs...), pvetest.PoolAudit...), pvetest.DatastoreUser...)}
		return append([]pvetest.Grant{g}, templates...)
	}
	lab := &pveLab{srv: srv}
	lab.alice = srv.AddToken(labAliceTokenID, append(admin("alice", pvetest.VMAdmin),
		pvetest.Grant{Path: fmt.Sprintf("/vms/%d", labForeignPool), Privs: []string{"VM.Audit"}})...)
	lab.carol = srv.AddToken("carol@pve!repro", admin("carol", pvetest.VMAdmin)...)
	lab.bob = srv.AddToken("bob@pve!ro", templates...)
	var noPower []string
	for _, p := range pvetest.VMAdmin {
		if p != "VM.PowerMgmt" {
			noPower = append(noPower, p)
		}
	}
	lab.dave = srv.AddToken("dave@pve!nopower", admin("dave", noPower)...)
	// As the README sets a token up: its role on the pool, the pool's
	// storages in it, PVETemplateUser on the templates, PVESDNUser on vmbr0.
	role := readmeRole(t)
	for _, who := range []struct {
		token *string
		owner string
	}{{&lab.erin, "erin"}, {&lab.fred, "fred"}} {
		srv.AddPool(who.owner)
		srv.AddPoolStorage(who.owner, "local-lvm")
		srv.AddPoolStorage(who.owner, "local")
		grants := []pvetest.Grant{{Path: "/pool/" + who.owner, Privs: role},
			{Path: "/sdn/zones/localnetwork/vmbr0", Privs: pvetest.SDNUser}}
		for _, id := range []int{9000, 9001, 9002, 9003, 9010} {
			grants = append(grants, pvetest.Grant{Path: fmt.Sprintf("/vms/%d", id), Privs: pvetest.TemplateUser})
		}
		*who.token = srv.AddToken(who.owner+"@pve!poligon", grants...)
	}
	return lab
}

// readmeRole answers the privileges of the role the README tells an
// administrator to make for poligon's tokens.
func readmeRole(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`pveum role add PoligonUser --privs "([^"]+)"`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("the README has no pveum role add PoligonUser --privs line")
	}
	return strings.Fields(string(m[1]))
}

// config is testConfig plus the manual's single-cluster setup: PVE_API and
// PVE_TOKEN (the stdio token; "" for none) make bench "pve", the default;
// it trusts the lab's CA and puts new disks on local-lvm.
func (l *pveLab) config(t *testing.T, token string) *config.Config {
	t.Helper()
	env := map[string]string{
		"POLIGON_OWNER":        "tester",
		"POLIGON_DATA":         testvm.ShortTempDir(t),
		"POLIGON_MCP_EVIDENCE": t.TempDir(),
		"POLIGON_STATE":        t.TempDir(),
		"POLIGON_MCP_AUDIT":    filepath.Join(t.TempDir(), "audit.jsonl"),
		"PVE_API":              l.srv.URL,
		"PVE_TOKEN":            token,
	}
	cfg, problems := config.Load("", false, func(k string) string { return env[k] })
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if cfg.DefaultBench != "pve" {
		t.Fatalf("PVE_API made default bench %q; want pve", cfg.DefaultBench)
	}
	for i := range cfg.Benches {
		if cfg.Benches[i].Type == "pve" {
			cfg.Benches[i].CAFile = l.srv.CAFile
			cfg.Benches[i].Storage = "local-lvm"
		}
	}
	cfg.Tokens = []config.Token{{Owner: "tester", Token: "tester-token-0123456789"}}
	return cfg
}

// server starts an engine on cfg whose log (debug level) the lab keeps for
// the secret check; Close runs in cleanup.
func (l *pveLab) server(t *testing.T, cfg *config.Config) *Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(lockedWriter{l}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := testServer(t, cfg, app.Options{Log: log})
	return s
}

type lockedWriter struct{ l *pveLab }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.logBuf.Write(p)
}

// call calls a tool and keeps its answer for the secret check.
func (l *pveLab) call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, *mcp.CallToolResult) {
	t.Helper()
	out, res := call(t, cs, name, args)
	l.mu.Lock()
	l.answers = append(l.answers, out)
	l.mu.Unlock()
	return out, res
}

func (l *pveLab) ok(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	out, res := l.call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: %s", name, args, out)
	}
	return out
}

// refuse fails unless the call was refused with "error: ..." containing
// want and a "hint: ..." line: every refusal tells the model what to do.
func (l *pveLab) refuse(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) string {
	t.Helper()
	out, res := l.call(t, cs, name, args)
	if !res.IsError || !strings.HasPrefix(out, "error: ") || !strings.Contains(out, want) {
		t.Fatalf("%s %v: want an error containing %q, got (isError=%v) %q", name, args, want, res.IsError, out)
	}
	if !strings.Contains(out, "\nhint: ") {
		t.Errorf("%s %v: the refusal has no hint line: %q", name, args, out)
	}
	return out
}

// checkNoSecrets fails if any token secret (the lab's, or the extra ones
// the test sent) is in a tool answer, the audit log or the server log.
func (l *pveLab) checkNoSecrets(t *testing.T, cfg *config.Config, extra ...string) {
	t.Helper()
	secrets := extra
	for _, tok := range []string{l.alice, l.carol, l.bob, l.dave, l.erin, l.fred} {
		secrets = append(secrets, tok[strings.LastIndex(tok, "=")+1:])
	}
	audit, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) == 0 {
		t.Fatal("the audit log is empty")
	}
	l.mu.Lock()
	places := map[string]string{"tool answers": strings.Join(l.answers, "\n"), "the server log": l.logBuf.String(), "the audit log": string(audit)}
	l.mu.Unlock()
	for where, text := range places {
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("a token secret is in %s", where)
			}
		}
	}
}

var upidIn = regexp.MustCompile(`upid=(UPID:\S+?),? call vm_task_wait`)

// upidOf answers the upid a "task still running" answer names.
func upidOf(t *testing.T, out string) string {
	t.Helper()
	m := upidIn.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no upid in %q", out)
	}
	return m[1]
}

// clone clones the lab's template through vm_clone and answers its vmid.
func (l *pveLab) clone(t *testing.T, cs *mcp.ClientSession, name string) int {
	t.Helper()
	out := l.ok(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": name})
	m := vmidLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("vm_clone answered %q", out)
	}
	return atoi(t, m[1])
}

// vmState answers the server's own view of a VM (not the lagging list).
func (l *pveLab) vmState(t *testing.T, vmid int) pvetest.VM {
	t.Helper()
	vm, ok := l.srv.VM(vmid)
	if !ok {
		t.Fatalf("vmid %d is gone from the cluster", vmid)
	}
	return vm
}

// TestPVEToolsOverStdio drives every built-in tool on a pve bench, through
// an in-memory MCP client that uses the bench's token (PVE_TOKEN), as an
// agent would: templates, clone, boot, commands, files, snapshots, the
// console, the installer tools, refusals, destroy.
func TestPVEToolsOverStdio(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{Agent: true, Console: true, AgentBootDelay: time.Second})
	cfg := lab.config(t, lab.alice)
	s := lab.server(t, cfg)
	cs := connect(t, s)

	t.Run("templates", func(t *testing.T) {
		out := lab.ok(t, cs, "vm_list_templates", nil)
		if want := "debian\t12-x86-64, 13-x86-64\np11-workstation\t11.1-x86-64\n"; out != want {
			t.Fatalf("vm_list_templates = %q; want %q (not-for-clone hidden)", out, want)
		}
		out = lab.ok(t, cs, "vm_list_templates", map[string]any{"filter": "debian-12", "bench": "pve"})
		if want := "9000\tdebian-12-x86-64\tpve1,pve2\n"; out != want {
			t.Fatalf("vm_list_templates filter = %q; want %q (one line, nodes folded)", out, want)
		}
		lab.refuse(t, cs, "vm_list_templates", map[string]any{"filter": "scratch"}, `no template name contains "scratch"`)
	})

	t.Run("my VMs are mine by name and pool", func(t *testing.T) {
		if out := lab.ok(t, cs, "vm_list_my_vms", nil); out != "owner alice: 0 VMs named alice-repro-*\n" {
			t.Fatalf("vm_list_my_vms = %q; want none of the foreign VMs it can see", out)
		}
	})

	vmid := lab.clone(t, cs, "flow")
	id := strconv.Itoa(vmid)
	t.Run("clone", func(t *testing.T) {
		if vm := lab.vmState(t, vmid); vm.Pool != "alice" || vm.Name != "alice-repro-flow" || vm.Node != "pve1" {
			t.Fatalf("the clone is %+v; want alice-repro-flow in pool alice on pve1", vm)
		}
		lab.refuse(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "flow"}, "already exists as vmid "+id)
		if out := lab.ok(t, cs, "vm_list_my_vms", nil); out != "owner alice: 1 VMs named alice-repro-*\n"+id+"\talice-repro-flow\tpve1\tstopped\n" {
			t.Fatalf("vm_list_my_vms = %q", out)
		}
		lab.refuse(t, cs, "vm_clone", map[string]any{"template_vmid": 9003, "name": "hidden"}, "template 9003 not found")
		lab.refuse(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "other", "pool": "bob"}, `pool "bob" is not one of yours`)
	})

	t.Run("boot", func(t *testing.T) {
		lab.refuse(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true"}, "is not running")
		lab.refuse(t, cs, "ui_screenshot", map[string]any{"vmid": vmid}, "console is dark")
		if out := lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid}); out != "ok: vmid "+id+" started" {
			t.Fatalf("vm_start = %q", out)
		}
		lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid}) // running already: a no-op
		lab.srv.SetAgentDown(vmid, true)
		if out := lab.ok(t, cs, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 1}); !strings.HasPrefix(out, "not booted after") {
			t.Fatalf("vm_wait_boot with the agent down = %q", out)
		}
		lab.refuse(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true", "timeout": 1}, "guest agent of vmid "+id+" does not answer")
		lab.srv.SetAgentDown(vmid, false)
		if out := lab.ok(t, cs, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 30}); !strings.HasPrefix(out, "booted") {
			t.Fatalf("vm_wait_boot = %q", out)
		}
	})

	t.Run("exec", func(t *testing.T) {
		out := lab.ok(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "echo hi; echo err >&2; exit 3"})
		if out != "exit 3\nhi\n--- stderr\nerr\n" {
			t.Fatalf("vm_exec = %q", out)
		}
		if out := lab.ok(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "printf 'привет' | wc -c; printf 'ünïcödé\\n'; umask"}); out != "exit 0\n12\nünïcödé\n0022\n" {
			t.Fatalf("non-ASCII command and output, umask = %q", out)
		}
		lab.srv.AgentBusy(2) // "got timeout" twice: waited for, not reported
		if out := lab.ok(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "echo through"}); out != "exit 0\nthrough\n" {
			t.Fatalf("vm_exec past a busy agent = %q", out)
		}
	})

	t.Run("run detached", func(t *testing.T) {
		// The "guest" is this host: the run's files are real files here.
		dir := t.TempDir()
		cmd := "echo start >> " + dir + "/runs; sleep 3; echo finished-run"
		failing := "cd " + dir + "; exit 7"
		for _, c := range []string{cmd, failing} {
			sum := sha256.Sum256([]byte(c))
			state := "/var/tmp/poligon-run/" + hex.EncodeToString(sum[:8])
			t.Cleanup(func() { os.RemoveAll(state) })
		}
		if out := lab.ok(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 1}); !strings.HasPrefix(out, "running for") {
			t.Fatalf("vm_run first call = %q", out)
		}
		var out string
		for i := 0; !strings.HasPrefix(out, "done exit 0"); i++ {
			if i == 4 {
				t.Fatalf("vm_run never finished: %q", out)
			}
			out = lab.ok(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 10})
		}
		if !strings.HasSuffix(out, "\nfinished-run") {
			t.Fatalf("vm_run tail = %q", out)
		}
		lab.ok(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 1})
		if runs, _ := os.ReadFile(filepath.Join(dir, "runs")); string(runs) != "start\n" {
			t.Fatalf("a finished run was repeated: runs = %q", runs)
		}
		if out := lab.ok(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": failing, "wait": 10}); !strings.HasPrefix(out, "failed exit 7") {
			t.Fatalf("vm_run of a failing command = %q", out)
		}
	})

	t.Run("files", func(t *testing.T) {
		dir := t.TempDir()
		text := strings.Repeat("0123456789", 3000)
		path := filepath.Join(dir, "f.txt")
		if out := lab.ok(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": path, "content_base64": base64.StdEncoding.EncodeToString([]byte(text))}); out != "ok: wrote 30000 bytes to "+path {
			t.Fatalf("vm_file_write = %q", out)
		}
		if got, _ := os.ReadFile(path); string(got) != text {
			t.Fatalf("the written file holds %d bytes, not the 30000 sent", len(got))
		}
		out := lab.ok(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": path})
		if out != text[:16384]+"\n… truncated at 16384 of 30000 bytes, continue with offset=16384" {
			t.Fatalf("vm_file_read window ends %q", out[max(0, len(out)-80):])
		}
		if out := lab.ok(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": path, "offset": 29990}); out != text[29990:] {
			t.Fatalf("vm_file_read tail = %q", out)
		}

		// Binary above PVE's 60 KiB file-write limit: sent in chunks through
		// exec, read back through file-read's latin-1 characters.
		bin := make([]byte, 100000)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range bin {
			bin[i] = byte(rng.UintN(256))
		}
		bin[0] = 0xFF // not a PNG or JPEG signature
		binPath := filepath.Join(dir, "blob.bin")
		lab.ok(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": binPath, "content_base64": base64.StdEncoding.EncodeToString(bin)})
		if got, _ := os.ReadFile(binPath); !bytes.Equal(got, bin) {
			t.Fatalf("the binary file differs from what was sent (%d of %d bytes)", len(got), len(bin))
		}
		out = lab.ok(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": binPath, "max_bytes": 200000})
		b64, ok := strings.CutPrefix(out, "(binary: 100000 bytes as base64)\n")
		if got, err := base64.StdEncoding.DecodeString(b64); !ok || err != nil || !bytes.Equal(got, bin) {
			t.Fatalf("vm_file_read of binary did not come back intact: %.80q (%v)", out, err)
		}

		var buf bytes.Buffer
		img := image.NewRGBA(image.Rect(0, 0, 4, 4))
		img.Set(1, 1, color.RGBA{255, 0, 0, 255})
		png.Encode(&buf, img)
		pngPath := filepath.Join(dir, "p.png")
		lab.ok(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": pngPath, "content_base64": base64.StdEncoding.EncodeToString(buf.Bytes())})
		_, res := lab.call(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": pngPath})
		if len(res.Content) != 2 || !bytes.Equal(res.Content[1].(*mcp.ImageContent).Data, buf.Bytes()) {
			t.Fatalf("a PNG did not come back as the image: %+v", res.Content)
		}
		lab.refuse(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": filepath.Join(dir, "nonexistent")}, "nonexistent")
		lab.refuse(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": pngPath, "content_base64": "!!"}, "not valid base64")
	})

	t.Run("console", func(t *testing.T) {
		out, res := lab.call(t, cs, "ui_screenshot", map[string]any{"vmid": vmid})
		if res.IsError || len(res.Content) != 2 {
			t.Fatalf("ui_screenshot = %q (%d parts)", out, len(res.Content))
		}
		shot, err := png.Decode(bytes.NewReader(res.Content[1].(*mcp.ImageContent).Data))
		if err != nil {
			t.Fatalf("the screenshot is no PNG: %v", err)
		}
		size := fmt.Sprintf("%dx%d", shot.Bounds().Dx(), shot.Bounds().Dy())
		if first, _, _ := strings.Cut(out, "\n"); first != size || shot.Bounds().Dx() < 640 || !frameName.MatchString(out) {
			t.Fatalf("ui_screenshot size line %q, image %s; want the VGA console", out, size)
		}
		if out := lab.ok(t, cs, "ui_screenshot", map[string]any{"vmid": vmid, "scale": 0.5}); !strings.Contains(out, "(scale 0.5 of "+size+")\n") {
			t.Fatalf("ui_screenshot scale = %q", out)
		}
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"ui_type", map[string]any{"text": "echo Hello & _done_\n"}},
			{"ui_key", map[string]any{"key": "ctrl-alt-f2"}},
			{"ui_key", map[string]any{"key": "ret"}},
			{"ui_click", map[string]any{"x": 10, "y": 10}},
			{"ui_click", map[string]any{"x": 100, "y": 50, "count": 2, "button": "right"}},
			{"ui_drag", map[string]any{"x1": 10, "y1": 10, "x2": 200, "y2": 100}},
		} {
			c.args["vmid"] = vmid
			if out := lab.ok(t, cs, c.tool, c.args); out != "ok" {
				t.Fatalf("%s = %q", c.tool, out)
			}
		}
		out, res = lab.call(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "esc", "screenshot": true, "settle_ms": 1000})
		if res.IsError || !strings.Contains(out, "timing: ") || len(res.Content) != 3 {
			t.Fatalf("ui_key with screenshot = %q (%d parts)", out, len(res.Content))
		}
		lab.refuse(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "entr"}, "hint: key names are qemu sendkey names")
		lab.refuse(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "no-such-key"}, `unknown key "no-such-key"`)
		lab.refuse(t, cs, "ui_key", map[string]any{"vmid": vmid, "key": "ctrl-alt-del"}, "did you mean ctrl-alt-delete?")
		lab.refuse(t, cs, "ui_click", map[string]any{"vmid": vmid, "x": 5000, "y": 10}, "outside the "+size+" console")
		lab.refuse(t, cs, "ui_type", map[string]any{"vmid": vmid, "text": "€"}, "nothing was typed")
		// Every call above went over RFB (not PVE's sendkey) on one shared
		// console: one ticket, one websocket.
		if n := lab.srv.Hits("PUT", "/nodes/pve1/qemu/"+id+"/sendkey"); n != 0 {
			t.Errorf("%d keys went through PUT sendkey; want all over the console", n)
		}
		if n := lab.srv.Hits("POST", "/nodes/pve1/qemu/"+id+"/vncproxy"); n != 1 {
			t.Errorf("%d vncproxy calls for one VM's console; want 1", n)
		}
		if open, accepted := lab.srv.ConsoleConnections(); open != 1 || accepted != 1 {
			t.Errorf("console websockets: %d open, %d accepted; want 1 and 1", open, accepted)
		}
	})

	t.Run("snapshot and rollback", func(t *testing.T) {
		if out := lab.ok(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "s1"}); out != "ok: vmid "+id+" snapshot s1 taken" {
			t.Fatalf("vm_snapshot = %q", out)
		}
		if out := lab.ok(t, cs, "vm_stop", map[string]any{"vmid": vmid}); out != "ok: vmid "+id+" stopped" {
			t.Fatalf("vm_stop = %q", out)
		}
		if vm := lab.vmState(t, vmid); vm.Status != "stopped" || len(vm.Snapshots) != 1 || vm.Snapshots[0] != "s1" {
			t.Fatalf("after snapshot and stop: %+v", vm)
		}
		lab.ok(t, cs, "vm_stop", map[string]any{"vmid": vmid}) // stopped already: a no-op
		if out := lab.ok(t, cs, "vm_rollback", map[string]any{"vmid": vmid, "name": "s1"}); out != "ok: vmid "+id+" rolled back to s1" {
			t.Fatalf("vm_rollback = %q", out)
		}
		if vm := lab.vmState(t, vmid); vm.Status != "running" {
			t.Fatalf("after rolling back to a snapshot of a running VM the VM is %s", vm.Status)
		}
		if out := lab.ok(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "echo back"}); out != "exit 0\nback\n" {
			t.Fatalf("vm_exec after rollback = %q", out)
		}
		lab.refuse(t, cs, "vm_rollback", map[string]any{"vmid": vmid, "name": "nosuch"}, "nosuch")
		lab.refuse(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "s1"}, "s1")
	})

	t.Run("installer", func(t *testing.T) {
		if out := lab.ok(t, cs, "iso_list", nil); out != "local:iso/alt-p11-x86_64.iso\t4096\n"+labISO+"\t661651456\n" {
			t.Fatalf("iso_list = %q", out)
		}
		if out := lab.ok(t, cs, "iso_list", map[string]any{"filter": "debian"}); out != labISO+"\t661651456\n" {
			t.Fatalf("iso_list filter = %q", out)
		}
		out := lab.ok(t, cs, "vm_create_iso", map[string]any{"name": "inst", "iso": labISO, "disks": 2, "disk_gb": 8, "mem_mb": 1024, "cores": 1, "uefi": true})
		m := vmidLine.FindStringSubmatch(out)
		if m == nil || m[2] != "alice-repro-inst" {
			t.Fatalf("vm_create_iso = %q", out)
		}
		inst := atoi(t, m[1])
		vm := lab.vmState(t, inst)
		c := vm.Config
		if vm.Pool != "alice" || c["bios"] != "ovmf" || !strings.HasPrefix(c["ide2"], labISO) || !strings.Contains(c["ide2"], "media=cdrom") ||
			!strings.Contains(c["scsi0"], "size=8G") || !strings.Contains(c["scsi1"], "size=8G") || c["memory"] != "1024" {
			t.Fatalf("the installer VM is %+v", vm)
		}
		lab.refuse(t, cs, "vm_create_iso", map[string]any{"name": "inst", "iso": labISO}, "alice-repro-inst")
		lab.refuse(t, cs, "vm_create_iso", map[string]any{"name": "inst2", "iso": "local:iso/nosuch.iso"}, "nosuch.iso")
		if out := lab.ok(t, cs, "vm_disk_resize", map[string]any{"vmid": inst, "disk": "scsi0", "size_gb": 16}); out != fmt.Sprintf("ok: vmid %d scsi0 is 16 GB", inst) {
			t.Fatalf("vm_disk_resize = %q", out)
		}
		lab.refuse(t, cs, "vm_disk_resize", map[string]any{"vmid": inst, "disk": "scsi1", "size_gb": 4}, "scsi1")
		if out := lab.ok(t, cs, "vm_disk_add", map[string]any{"vmid": inst, "size_gb": 4, "count": 2}); out != fmt.Sprintf("ok: vmid %d added scsi2, scsi3 (4 GB each)", inst) {
			t.Fatalf("vm_disk_add = %q", out)
		}
		if out := lab.ok(t, cs, "vm_eject", map[string]any{"vmid": inst}); out != fmt.Sprintf("ok: vmid %d CD ejected", inst) {
			t.Fatalf("vm_eject = %q", out)
		}
		c = lab.vmState(t, inst).Config
		if !strings.Contains(c["scsi0"], "size=16G") || !strings.Contains(c["scsi1"], "size=8G") || !strings.Contains(c["scsi2"], "size=4G") ||
			!strings.Contains(c["scsi3"], "size=4G") || strings.Contains(c["ide2"], "debian") {
			t.Fatalf("after resize, add and eject the config is %v", c)
		}
		lab.ok(t, cs, "vm_destroy", map[string]any{"vmid": inst, "confirm": true})
		if _, ok := lab.srv.VM(inst); ok {
			t.Fatalf("vmid %d survived vm_destroy", inst)
		}
	})

	t.Run("not mine", func(t *testing.T) {
		lab.refuse(t, cs, "vm_exec", map[string]any{"vmid": labForeignName, "command": "true"}, `is not yours: its name "bob-repro-y" does not start with alice-repro-`)
		lab.refuse(t, cs, "vm_exec", map[string]any{"vmid": labForeignPool, "command": "true"}, "is not yours")
		lab.refuse(t, cs, "vm_start", map[string]any{"vmid": labForeignHid}, fmt.Sprintf("vmid %d not found", labForeignHid))
		lab.refuse(t, cs, "vm_start", map[string]any{"vmid": labTemplate}, "it is a template")
		for _, foreign := range []int{labForeignName, labForeignPool} {
			lab.refuse(t, cs, "vm_destroy", map[string]any{"vmid": foreign, "confirm": true}, "is not yours")
			lab.refuse(t, cs, "vm_start", map[string]any{"vmid": foreign}, "is not yours")
			lab.refuse(t, cs, "vm_snapshot", map[string]any{"vmid": foreign, "name": "x1"}, "is not yours")
			lab.refuse(t, cs, "ui_screenshot", map[string]any{"vmid": foreign}, "is not yours")
			if vm := lab.vmState(t, foreign); vm.Status != "stopped" || len(vm.Snapshots) != 0 {
				t.Fatalf("a refused call changed vmid %d: %+v", foreign, vm)
			}
		}
	})

	t.Run("destroy", func(t *testing.T) {
		if out := lab.ok(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true}); out != "ok: vmid "+id+" alice-repro-flow destroyed" {
			t.Fatalf("vm_destroy = %q", out)
		}
		if _, ok := lab.srv.VM(vmid); ok {
			t.Fatal("the VM survived vm_destroy")
		}
		if open := lab.srv.OpenConsolesAfter(10 * time.Second); open != 0 {
			t.Errorf("%d console websockets outlived the VM", open)
		}
		if out := lab.ok(t, cs, "vm_list_my_vms", nil); out != "owner alice: 0 VMs named alice-repro-*\n" {
			t.Fatalf("after vm_destroy: %q", out)
		}
	})

	t.Run("close releases the consoles", func(t *testing.T) {
		last := lab.clone(t, cs, "last")
		lab.ok(t, cs, "vm_start", map[string]any{"vmid": last})
		lab.ok(t, cs, "ui_screenshot", map[string]any{"vmid": last})
		if open, _ := lab.srv.ConsoleConnections(); open != 1 {
			t.Fatalf("%d console websockets open; want 1", open)
		}
		s.app.Close()
		if open := lab.srv.OpenConsolesAfter(10 * time.Second); open != 0 {
			t.Fatalf("%d console websockets outlived Server.Close", open)
		}
	})

	lab.checkNoSecrets(t, cfg)
}
