package engine

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends/bmc/redfishtest"
	"github.com/poligon/poligon/backends/pikvm/kvmdtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
	"github.com/poligon/poligon/internal/editdist"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/testvm"
)

// TestMegaRACBench: a MegaRAC bench through the MCP tools, the real bmc
// client against the Redfish fake, which drives a real QEMU machine (the
// fake's own, with a CD drive): power goes through to the VM, media shows
// up as /dev/sr0 in the guest, the console is a clear capability error, and
// the password is in no answer or audit line.
func TestMegaRACBench(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	testvm.RequireQEMU(t)
	dir, err := os.MkdirTemp("", "e2ebmc") // unix socket paths must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	vm, err := redfishtest.StartVM(testvm.TemplatesDir(t), dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := vm.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	const password = "Bmc-e2e-Secret-99"
	fake, err := redfishtest.Start(redfishtest.Options{Dialect: "megarac", User: "admin", Password: password, QMP: vm.QMP[0], CD: vm.CDID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	// An http storage with an installer image: 2 MiB and a marker.
	img := append(bytes.Repeat([]byte{0}, 2<<20-16), []byte("POLIGON-E2E-ISO.")...)
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "installer.iso", time.Time{}, bytes.NewReader(img))
	}))
	t.Cleanup(mirror.Close)

	cfg := testConfig(t, t.TempDir())
	cfg.Benches = append(cfg.Benches, config.Bench{Name: "srv1", Type: "bmc", Endpoint: config.Endpoint{API: fake.URL}, PhysicalBench: config.PhysicalBench{Dialect: "megarac", User: "admin", Password: config.Secret(password), PinSHA256: fake.Fingerprint, Allow: []string{"power", "media"}}})
	cfg.Storages = []config.Storage{{Name: "mirror", Type: "http", Address: mirror.URL}}
	if problems := cfg.Check(); len(problems) > 0 {
		t.Fatal(problems)
	}
	logged := &testvm.SyncBuffer{}
	s := testServer(t, cfg, app.Options{Log: debugLog(t, logged), OpenBench: func(bc config.Bench, log *slog.Logger) (app.Bench, error) {
		return app.NewRoot().Open(bc, log)
	}})
	cs := connect(t, s)
	with := func(kv ...any) map[string]any {
		m := map[string]any{"bench": "srv1"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	if out := mustOK(t, cs, "bench_status", nil); !strings.Contains(out, "srv1\tbmc\t"+strings.TrimSuffix(fake.URL, "/")+"\tyes\tfree\ton") {
		t.Fatalf("bench_status:\n%s", out)
	}
	mustRefuse(t, cs, "ui_screenshot", with("vmid", 1), "no console")
	// Media: mounted from the storage, the guest sees it.
	mustOK(t, cs, "bench_media", with("action", "mount", "storage", "mirror", "path", "installer.iso"))
	out, err := vm.Exec(ctx, "blockdev --getsize64 /dev/sr0; tail -c 16 /dev/sr0")
	if err != nil || !strings.Contains(out, "2097152") || !strings.Contains(out, "POLIGON-E2E-ISO.") {
		t.Errorf("after bench_media mount the guest says %q (%v)", out, err)
	}
	mustOK(t, cs, "bench_media", with("action", "eject"))
	// Power: off-hard stops the machine, on starts it, and the guest agent
	// comes back.
	if out := mustOK(t, cs, "bench_power", with("action", "off-hard")); !strings.Contains(out, "now off") {
		t.Errorf("off-hard = %q", out)
	}
	if out := mustOK(t, cs, "bench_power", with("action", "on")); !strings.Contains(out, "now on") {
		t.Errorf("on = %q", out)
	}
	if err := vm.WaitAgent(ctx); err != nil {
		t.Errorf("the guest did not come back after power on: %v", err)
	}
	if out := mustOK(t, cs, "bench_power", with("action", "status")); out != "power on" {
		t.Errorf("status = %q", out)
	}
	if n := fake.OpenSessions(); n != 0 {
		t.Errorf("%d Redfish sessions left open", n)
	}
	backendLine(t, logged.String(), "srv1", "bmc operation")
	for what, text := range map[string]string{"log": logged.String(), "audit": readFile(t, s.cfg.AuditLog)} {
		if strings.Contains(text, password) {
			t.Errorf("the BMC password is in the %s", what)
		}
	}
}

// TestPiKVMBench: a PiKVM bench through the MCP tools, the real pikvm
// client against the kvmd fake, which drives a real QEMU machine: the
// console's screenshot and OCR, typing that reaches the guest's shell, and
// Ctrl+Alt+Del refused as a power action on a HID-only bench.
func TestPiKVMBench(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	testvm.RequireQEMU(t)
	vm := kvmdtest.TinyVM(t)
	const password = "Kvmd-e2e-Secret-77"
	fake, err := kvmdtest.New(kvmdtest.Options{VM: vm, User: "admin", Password: password, StreamerStart: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	cfg := testConfig(t, t.TempDir())
	cfg.Benches = append(cfg.Benches, config.Bench{Name: "kvm1", Type: "pikvm", Endpoint: config.Endpoint{API: fake.URL()}, PhysicalBench: config.PhysicalBench{User: "admin", Password: config.Secret(password), PinSHA256: fake.Fingerprint(), Allow: []string{"hid"}}})
	if problems := cfg.Check(); len(problems) > 0 {
		t.Fatal(problems)
	}
	logged := &testvm.SyncBuffer{}
	log := debugLog(t, logged)
	s := testServer(t, cfg, app.Options{Log: log, OpenBench: func(bc config.Bench, log *slog.Logger) (app.Bench, error) {
		return app.NewRoot().Open(bc, log)
	}})
	cs := connect(t, s)
	kvm := func(kv ...any) map[string]any {
		m := map[string]any{"bench": "kvm1", "vmid": 1}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}

	if out, res := call(t, cs, "ui_screenshot", kvm()); res.IsError || len(res.Content) != 2 || !strings.HasPrefix(out, "720x400\n") {
		t.Fatalf("ui_screenshot on the PiKVM = %q", out)
	} else if img := res.Content[1].(*mcp.ImageContent); img.MIMEType != "image/jpeg" || !bytes.HasPrefix(img.Data, []byte{0xff, 0xd8}) {
		t.Fatalf("ui_screenshot on the PiKVM carries %s, not kvmd's JPEG", img.MIMEType)
	}
	mustOK(t, cs, "ui_type", kvm("text", "echo poligon via kvm >/tmp/kvm.txt\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent, err := vm.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		data, _, err := agent.ReadFile(ctx, "/tmp/kvm.txt", 0, 100)
		if err == nil && string(data) == "poligon via kvm\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("what ui_type typed through the PiKVM did not run in the guest: %q, %v", data, err)
		}
	}
	mustOK(t, cs, "ui_wait_for", kvm("timeout", 20))
	// The console comes as JPEG: "kvm" may read "kum"; a few edits pass.
	out := mustOK(t, cs, "ui_read", kvm())
	at, _ := readRows(t, out)
	found := false
	for label := range at {
		found = found || editdist.Levenshtein(label, "tiny:~# echo poligon via kvm >/tmp/kvm.txt") <= 4
	}
	if !found {
		t.Errorf("ui_read of the PiKVM's console has no line of the typed command:\n%s", out)
	}
	if out := mustOK(t, cs, "ui_click_label", kvm("label", "poligon")); !strings.Contains(out, "(source: ocr)") {
		t.Errorf("ui_click_label on the PiKVM = %q", out)
	}
	mustRefuse(t, cs, "ui_key", kvm("key", "ctrl-alt-delete"), "does not allow power actions")
	mustRefuse(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "reset", "confirm": true}, "does not allow power actions")
	backendLine(t, logged.String(), "kvm1", "pikvm: stream opened")
	backendLine(t, logged.String(), "kvm1", "pikvm: kvmd version")
	for what, text := range map[string]string{"log": logged.String(), "audit": readFile(t, s.cfg.AuditLog)} {
		if strings.Contains(text, password) {
			t.Errorf("the PiKVM password is in the %s", what)
		}
	}
}

// debugLog is the binary's logger (logfmt) at debug, writing to buf: the
// secret scans then see every backend line.
func debugLog(t *testing.T, buf *testvm.SyncBuffer) *slog.Logger {
	t.Helper()
	log, err := logs.New(buf, "logfmt", "debug")
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// backendLine fails unless the log holds a line msg from the backend of
// bench (so its lines reach the operator's log, named by bench).
func backendLine(t *testing.T, text, bench, msg string) {
	t.Helper()
	for _, l := range logLines(t, text) {
		if l["msg"] == msg && l["bench"] == bench {
			return
		}
	}
	t.Errorf("no %q line of bench %s in the log:\n%s", msg, bench, text)
}
