package engine

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/internal/app"
)

// The bench tools over MCP, on physical benches whose controller is an
// in-memory one (the PiKVM and BMC clients are tested against their
// wire-level fakes in their packages): leases between two callers, the
// gates, dry runs and a human's approval through elicitation.

// controller records the power and media actions that reach it; its
// console is backendtest's.
type controller struct {
	*backendtest.Backend
	mu      sync.Mutex
	state   string
	actions []string
	ignored bool // the machine ignores power actions (an OS that ignores ACPI)
}

func (c *controller) Close() error { return nil }
func (c *controller) PowerState(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, nil
}
func (c *controller) Power(ctx context.Context, action string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.actions = append(c.actions, "power "+action)
	if c.ignored {
		return nil
	}
	c.state = map[string]string{"on": "on", "off": "off", "off-hard": "off", "reset": "on", "cycle": "on"}[action]
	return nil
}
func (c *controller) MediaList(ctx context.Context) ([]backends.MediaImage, backends.MediaState, error) {
	return []backends.MediaImage{{Name: "debian-12.iso", Size: 600 << 20}, {Name: "alt-p11.iso", Size: 4 << 30}}, backends.MediaState{}, nil
}
func (c *controller) MediaMount(ctx context.Context, m backends.MediaMount) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.actions = append(c.actions, "mount "+m.Image+m.URL+" "+m.Mode)
	return nil
}
func (c *controller) MediaEject(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.actions = append(c.actions, "eject")
	return nil
}
func (c *controller) done() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.actions, ", ")
}

// physicalServer serves a local bench plus kvm1 (a rental that allows
// everything and asks a human for power and media) and kvm2 (HID only, a
// dry run), each on its own controller.
func physicalServer(t *testing.T, cfg *config.Config) (*Server, map[string]*controller) {
	t.Helper()
	if cfg == nil {
		cfg = testConfig(t, t.TempDir())
	}
	cfg.Benches = append(cfg.Benches,
		config.Bench{Name: "kvm1", Type: "pikvm", Description: "RAID box", Endpoint: config.Endpoint{API: "https://kvm1.lab"}, PhysicalBench: config.PhysicalBench{User: "admin", Password: "pw-kvm1-secret", Rental: true, Allow: []string{"hid", "power", "media"}, Approval: "ask"}},
		config.Bench{Name: "kvm2", Type: "pikvm", Endpoint: config.Endpoint{API: "https://kvm2.lab"}, PhysicalBench: config.PhysicalBench{User: "admin", Password: "pw-kvm2-secret", Allow: []string{"hid"}, DryRun: true}})
	cfg.Storages = []config.Storage{{Name: "mirror", Type: "http", Address: "https://mirror.lab/iso/"}, {Name: "share", Type: "nfs", Address: "nfs.lab:/iso"}}
	if problems := cfg.Check(); len(problems) > 0 {
		t.Fatal(problems)
	}
	ctls := map[string]*controller{}
	s := testServer(t, cfg, app.Options{OpenBench: func(bc config.Bench, log *slog.Logger) (app.Bench, error) {
		if !bc.Physical() {
			return app.NewRoot().Open(bc, log)
		}
		be := backendtest.New(bc.Name)
		be.AddVM(backends.VM{VMID: 1, Name: bc.Name, Status: "running"})
		ctls[bc.Name] = &controller{Backend: be, state: "on"}
		return app.Physical(bc, ctls[bc.Name]), nil
	}})
	return s, ctls
}

// elicitingClient connects a client whose human answers every question
// with action.
func elicitingClient(t *testing.T, s *Server, action string, asked *int) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	c := mcp.NewClient(&mcp.Implementation{Name: "human", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			*asked++
			return &mcp.ElicitResult{Action: action}, nil
		},
	})
	cs, err := c.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestBenchTools(t *testing.T) {
	s, ctls := physicalServer(t, nil)
	cs := connect(t, s)

	out := mustOK(t, cs, "bench_status", nil)
	for _, want := range []string{"kvm1\tpikvm\thttps://kvm1.lab\tlease it first\tfree\ton\tRAID box", "kvm2\tpikvm\thttps://kvm2.lab\tyes\tfree\ton"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench_status lacks %q:\n%s", want, out)
		}
	}
	// A rental needs the caller's lease, for the console tools too.
	mustRefuse(t, cs, "ui_screenshot", map[string]any{"bench": "kvm1", "vmid": 1}, "you hold no lease")
	mustRefuse(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "status"}, "you hold no lease")
	if out := mustOK(t, cs, "bench_lease", map[string]any{"bench": "kvm1", "minutes": 60}); !strings.HasPrefix(out, "leased kvm1 until ") {
		t.Fatalf("bench_lease = %q", out)
	}
	if out := mustOK(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "status"}); out != "power on" {
		t.Errorf("power status = %q", out)
	}
	mustRefuse(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "reboot"}, "invalid arguments")
	mustRefuse(t, cs, "bench_power", map[string]any{"bench": "local", "action": "status"}, "not a physical machine")
	mustRefuse(t, cs, "bench_lease", map[string]any{"bench": "kvm1", "minutes": 481}, "invalid arguments")

	// kvm1 asks a human: this client cannot be asked, so confirm=true it is.
	mustRefuse(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "reset"}, "needs confirmation")
	if out := mustOK(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "reset", "confirm": true}); out != "power reset done; now on" {
		t.Errorf("confirmed reset = %q", out)
	}
	// A client whose human declines changes nothing; one who accepts does it.
	asked := 0
	no := elicitingClient(t, s, "decline", &asked)
	mustRefuse(t, no, "bench_media", map[string]any{"bench": "kvm1", "action": "mount", "image": "debian-12.iso"}, "not approved (decline)")
	yes := elicitingClient(t, s, "accept", &asked)
	if out := mustOK(t, yes, "bench_media", map[string]any{"bench": "kvm1", "action": "mount", "image": "debian-12.iso"}); out != "mounted as cd" {
		t.Errorf("approved mount = %q", out)
	}
	if asked != 2 {
		t.Errorf("the human was asked %d times, want 2", asked)
	}
	if got := ctls["kvm1"].done(); got != "power reset, mount debian-12.iso cd" {
		t.Errorf("kvm1 saw %q", got)
	}
	// Media from a storage: an http one gives the URL; others are refused.
	mustOK(t, cs, "bench_media", map[string]any{"bench": "kvm1", "action": "mount", "storage": "mirror", "path": "alt-p11.iso", "mode": "flash", "confirm": true})
	mustRefuse(t, cs, "bench_media", map[string]any{"bench": "kvm1", "action": "mount", "storage": "share", "path": "x.iso", "confirm": true}, "over http only")
	mustRefuse(t, cs, "bench_media", map[string]any{"bench": "kvm1", "action": "mount", "storage": "mirror", "path": "../etc/passwd", "confirm": true}, "without ..")
	if got := ctls["kvm1"].done(); !strings.HasSuffix(got, "mount https://mirror.lab/iso/alt-p11.iso flash") {
		t.Errorf("kvm1 saw %q", got)
	}
	if out := mustOK(t, cs, "bench_media", map[string]any{"bench": "kvm1", "action": "list", "filter": "DEB"}); !strings.Contains(out, "debian-12.iso\t629145600") || strings.Contains(out, "alt") {
		t.Errorf("media list = %q", out)
	}

	// kvm2 allows HID only, as a dry run: power is refused without naming
	// the setting; typing is logged and skipped.
	out = mustRefuse(t, cs, "bench_power", map[string]any{"bench": "kvm2", "action": "off", "confirm": true}, "does not allow power actions")
	if strings.Contains(out, "allow =") || strings.Contains(out, "config") {
		t.Errorf("the refusal spells out the configuration: %q", out)
	}
	if out := mustOK(t, cs, "ui_type", map[string]any{"bench": "kvm2", "vmid": 1, "text": "reboot"}); !strings.HasPrefix(out, "dry run: typing was logged and not done") {
		t.Errorf("ui_type on a dry-run bench = %q", out)
	}
	if ctls["kvm2"].Count("Type") != 0 || ctls["kvm2"].done() != "" {
		t.Errorf("a dry run reached kvm2")
	}
	if out := mustOK(t, cs, "storage_list", nil); !strings.Contains(out, "mirror\thttp\thttps://mirror.lab/iso/") {
		t.Errorf("storage_list = %q", out)
	}
	// Another server on the same state_dir (a restart, a poligon run) sees
	// the lease.
	cfg2 := *s.cfg
	cfg2.Benches = slices.DeleteFunc(slices.Clone(cfg2.Benches), func(b config.Bench) bool { return b.Physical() })
	s2, _ := physicalServer(t, &cfg2)
	if out := mustOK(t, connect(t, s2), "bench_status", nil); !strings.Contains(out, "kvm1\tpikvm\thttps://kvm1.lab\tyes (your lease)\ttester until ") {
		t.Errorf("bench_status of a second server:\n%s", out)
	}
	if out := mustOK(t, cs, "bench_release", map[string]any{"bench": "kvm1"}); out != "released" {
		t.Errorf("bench_release = %q", out)
	}
	// No password in any answer or the audit log.
	if a := readFile(t, s.cfg.AuditLog); strings.Contains(a, "pw-kvm") {
		t.Errorf("a password is in the audit log")
	}
}

// The tools that list benches and storages answer a caller the default
// bench would refuse: they open no bench, and bench_status says which the
// caller may use.
func TestBenchListsNeedNoDefaultBench(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Benches = append(cfg.Benches, config.Bench{Name: "pikvm1", Type: "pikvm", Endpoint: config.Endpoint{API: "https://pikvm1.lab"}, PhysicalBench: config.PhysicalBench{User: "admin", Password: "pw-pikvm1-secret", Key: "pikvm1-key-0123456789abcdef", Allow: []string{"hid"}}})
	cfg.DefaultBench = "pikvm1"
	s, _ := physicalServer(t, cfg)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	cs, err := httpClient(t, ts.URL, map[string]string{"Authorization": "Bearer tester-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	out := mustOK(t, cs, "bench_status", nil)
	for _, want := range []string{"pikvm1\tpikvm\thttps://pikvm1.lab\tno: bench pikvm1 needs its key", "local\tqemu\t-\tyes", "kvm2\tpikvm\thttps://kvm2.lab\tyes"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench_status lacks %q:\n%s", want, out)
		}
	}
	if out := mustOK(t, cs, "storage_list", nil); !strings.Contains(out, "mirror\thttp\thttps://mirror.lab/iso/") {
		t.Errorf("storage_list = %q", out)
	}
	// The other tools still need the default bench's key.
	mustRefuse(t, cs, "bench_power", map[string]any{"action": "status"}, "needs its key")
}

// A machine whose state does not follow an accepted action (an OS that
// ignores the ACPI button, a BMC slower than its bound): the answer says the
// action was accepted and the state has not changed, not "done; now on",
// which an agent reads as a failure to retry.
func TestBenchPowerNotFollowed(t *testing.T) {
	s, ctls := physicalServer(t, nil)
	cs := connect(t, s)
	ctls["kvm1"].ignored = true
	mustOK(t, cs, "bench_lease", map[string]any{"bench": "kvm1", "minutes": 5})
	out := mustOK(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "off", "confirm": true})
	if out != "power off accepted; the machine still reports on: it has not followed yet (check with action=status; repeating the action would do it twice)" {
		t.Errorf("power off of a machine that stays on = %q", out)
	}
	ctls["kvm1"].ignored = false
	if out := mustOK(t, cs, "bench_power", map[string]any{"bench": "kvm1", "action": "off", "confirm": true}); out != "power off done; now off" {
		t.Errorf("power off = %q", out)
	}
}

// A caller with only a bench's key is its own principal, and no [[token]]
// owner can be it: an owner named after the key principal's old name
// ("key" + bench) does not share its lease.
func TestKeyPrincipalIsNoOwner(t *testing.T) {
	const key = "kvm3-key-0123456789abcdef"
	cfg := testConfig(t, t.TempDir())
	cfg.Tokens = append(cfg.Tokens, config.Token{Owner: "keykvm3", Token: "keykvm3-token-0123456789"})
	cfg.Benches = append(cfg.Benches, config.Bench{Name: "kvm3", Type: "pikvm", Endpoint: config.Endpoint{API: "https://kvm3.lab"}, PhysicalBench: config.PhysicalBench{User: "admin", Password: "pw-kvm3-secret", Key: key, Rental: true, Allow: []string{"hid", "power"}}})
	s, _ := physicalServer(t, cfg)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	keyed, err := httpClient(t, ts.URL, map[string]string{"X-Bench-Key": key})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := httpClient(t, ts.URL, map[string]string{"X-Bench-Key": key, "Authorization": "Bearer keykvm3-token-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, keyed, "bench_lease", map[string]any{"bench": "kvm3", "minutes": 5})
	if out := mustOK(t, keyed, "bench_power", map[string]any{"bench": "kvm3", "action": "status"}); out != "power on" {
		t.Errorf("the key's own lease: %q", out)
	}
	mustRefuse(t, owner, "bench_power", map[string]any{"bench": "kvm3", "action": "status"}, "key:kvm3 holds it")
	mustRefuse(t, owner, "bench_lease", map[string]any{"bench": "kvm3", "minutes": 5}, "leased by key:kvm3")
}
