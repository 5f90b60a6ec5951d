package bmc

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/bmc/redfishtest"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/internal/testvm"
)

// One VM for the whole package: the fakes drive it through QMP socket 0,
// the tests look at it through the last one.
var shared struct {
	once  sync.Once
	vm    *redfishtest.VM
	dir   string
	err   error
	socks chan string // QMP sockets free for fakes (QEMU serves one client each)

	mu  sync.Mutex
	qmp *qmp.Client
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.qmp != nil {
		shared.qmp.Close()
	}
	if shared.vm != nil {
		shared.vm.Stop()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// machine answers the shared VM, booted once (its agent answered).
func machine(t testing.TB) *redfishtest.VM {
	t.Helper()
	testvm.RequireQEMU(t)
	tpl := testvm.TemplatesDir(t)
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "bmc")
		if shared.err != nil {
			return
		}
		shared.vm, shared.err = redfishtest.StartVM(tpl, shared.dir, 4)
		if shared.err != nil {
			return
		}
		shared.socks = make(chan string, 3)
		for _, s := range shared.vm.QMP[:3] {
			shared.socks <- s
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		shared.err = shared.vm.WaitAgent(ctx)
	})
	if shared.err != nil {
		t.Fatalf("the test VM: %v", shared.err)
	}
	return shared.vm
}

// testQMP runs f on the test's own monitor of the VM.
func testQMP(t testing.TB, f func(ctx context.Context, c *qmp.Client) error) {
	t.Helper()
	vm := machine(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if shared.qmp == nil {
		c, err := qmp.Dial(ctx, vm.QMP[len(vm.QMP)-1])
		if err != nil {
			t.Fatal(err)
		}
		shared.qmp = c
	}
	if err := f(ctx, shared.qmp); err != nil {
		t.Fatal(err)
	}
}

// vmStatus is QEMU's run state.
func vmStatus(t testing.TB) string {
	t.Helper()
	var st qmp.Status
	testQMP(t, func(ctx context.Context, c *qmp.Client) (err error) {
		st, err = c.QueryStatus(ctx)
		return err
	})
	return st.Status
}

// ensureOn powers the VM on if a test left it off.
func ensureOn(t testing.TB) {
	t.Helper()
	if vmStatus(t) == "running" {
		return
	}
	testQMP(t, func(ctx context.Context, c *qmp.Client) error {
		if err := c.SystemReset(ctx); err != nil {
			return err
		}
		return c.Cont(ctx)
	})
}

// ensureAgent waits until the guest agent answers (booting if needed).
func ensureAgent(t testing.TB) *redfishtest.VM {
	t.Helper()
	vm := machine(t)
	ensureOn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := vm.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	return vm
}

// guest runs a shell command in the guest and answers its stdout.
func guest(t testing.TB, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := machine(t).Exec(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ensureNoMedia empties the CD drive behind any fake's back.
func ensureNoMedia(t testing.TB) {
	t.Helper()
	testQMP(t, func(ctx context.Context, c *qmp.Client) error {
		c.Eject(ctx, machine(t).CDID, true) // an empty drive answers an error: fine
		return nil
	})
}

const testUser = "poligon"

// testPassword is recognisable, so a test can look for it anywhere.
const testPassword = "Pw-7f3a-SECRET-91"

// fakeLog collects what fakes and benches log, for secret checks.
var fakeLog testvm.SyncBuffer

// startFake starts a fake BMC on the shared VM.
func startFake(t testing.TB, opts redfishtest.Options) *redfishtest.Server {
	t.Helper()
	vm := machine(t)
	if opts.User == "" {
		opts.User, opts.Password = testUser, testPassword
	}
	select {
	case opts.QMP = <-shared.socks:
	default:
		t.Fatal("more than 3 fakes at once")
	}
	opts.CD = vm.CDID
	if opts.Log == nil {
		opts.Log = &fakeLog
	}
	s, err := redfishtest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	sock := opts.QMP
	t.Cleanup(func() { s.Close(); shared.socks <- sock })
	return s
}

// benchFor answers a bench on fake s, trusting its certificate by pin
// (MegaRAC's names only ami.com) unless mod says otherwise.
func benchFor(t testing.TB, s *redfishtest.Server, dialect string, mod ...func(*Config)) *Bench {
	t.Helper()
	cfg := Config{Name: "t-" + dialect, URL: s.URL, User: testUser, Password: testPassword, Dialect: dialect,
		PinSHA256: s.Fingerprint, Log: slog.New(slog.NewTextHandler(&fakeLog, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, f := range mod {
		f(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// imageServer serves one image over HTTP, as a distribution mirror does.
func imageServer(t testing.TB, name string, data []byte) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+name {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + name
}

// resetTypes answers the ResetType of every Reset the fake received.
func resetTypesSent(s *redfishtest.Server) []string {
	var out []string
	for _, r := range s.Requests() {
		if strings.HasSuffix(r.Path, "/Actions/ComputerSystem.Reset") {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(r.Body, `{"ResetType":"`), `"}`))
		}
	}
	return out
}

// secretFree fails the test when a password shows in text.
func secretFree(t testing.TB, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range append([]string{testPassword}, secrets...) {
		if strings.Contains(text, s) {
			t.Errorf("%s shows a secret: %q", what, text)
		}
	}
}
