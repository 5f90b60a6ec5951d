package pikvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pikvm/kvmdtest"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/internal/testvm"
)

// Recognisable secrets: no error text, hint or log line may contain them.
const (
	testUser     = "admin"
	testPassword = "Pw-9f3c-SECRET-kvmd"
	testTOTP     = "JBSWY3DPEHPK3PXPJBSWY3DP"
)

// One machine serves every test of the package (a boot costs ~8 s under
// TCG); each test starts its own fake kvmd in front of it.
var shared struct {
	once  sync.Once
	vm    *kvmdtest.VM
	dir   string
	agent *qga.Client
	err   error
}

// texts collects every error text, hint and log line the tests saw, for
// the secrets check at the end.
var texts struct {
	sync.Mutex
	b strings.Builder
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.vm != nil {
		shared.agent.Close()
		shared.vm.Close()
		os.RemoveAll(shared.dir)
	}
	texts.Lock()
	all := texts.b.String()
	texts.Unlock()
	for _, secret := range []string{testPassword, testTOTP} {
		if strings.Contains(all, secret) {
			fmt.Fprintf(os.Stderr, "FAIL: a secret (%.4s...) appeared in an error, hint or log line\n", secret)
			code = 1
		}
	}
	os.Exit(code)
}

// machine answers the shared VM and its agent, booting it on first use.
func machine(t testing.TB) (*kvmdtest.VM, *qga.Client) {
	t.Helper()
	testvm.RequireQEMU(t)
	shared.once.Do(func() {
		cfg := kvmdtest.TinyConfig(t)
		shared.dir, shared.err = os.MkdirTemp("", "pgkvm")
		if shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if shared.vm, shared.err = kvmdtest.StartTiny(ctx, cfg, shared.dir); shared.err != nil {
			return
		}
		shared.agent, shared.err = shared.vm.Agent(ctx)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	if shared.vm == nil {
		t.Fatal("the shared machine was not built (see the first test's log)")
	}
	waitReady(t, shared.vm, shared.agent)
	return shared.vm, shared.agent
}

// waitReady waits until the machine runs, its agent answers and its USB
// keyboard and tablet are there (they enumerate after the agent starts).
func waitReady(t testing.TB, vm *kvmdtest.VM, a *qga.Client) {
	t.Helper()
	ctx := testContext(t)
	if err := vm.WaitAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	for {
		out, err := guest(ctx, a, "grep -c 'QEMU USB' /proc/bus/input/devices")
		if err == nil && strings.TrimSpace(out) == "2" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the guest's USB keyboard and tablet did not appear: %q %v", out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a cap for a loaded machine, not a target
	t.Cleanup(cancel)
	return ctx
}

// guest runs a shell command in the guest and answers its output.
func guest(ctx context.Context, a *qga.Client, cmd string) (string, error) {
	pid, err := a.Exec(ctx, qga.ExecRequest{Path: "/bin/sh", Args: []string{"-c", cmd}, CaptureOutput: true})
	if err != nil {
		return "", err
	}
	for {
		st, err := a.ExecStatus(ctx, pid)
		if err != nil {
			return "", err
		}
		if st.Exited {
			out := string(st.Stdout) + string(st.Stderr)
			if st.ExitCode != 0 {
				return out, fmt.Errorf("guest command %q exited %d: %s", cmd, st.ExitCode, out)
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func mustGuest(t testing.TB, a *qga.Client, cmd string) string {
	t.Helper()
	out, err := guest(testContext(t), a, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fakeOpts are quick ATX timings for tests (kvmd's are 0.1 s, 5.5 s, 1 s).
func fakeOpts(vm *kvmdtest.VM) kvmdtest.Options {
	return kvmdtest.Options{
		VM: vm, User: testUser, Password: testPassword,
		ClickDelay: 50 * time.Millisecond, LongClickDelay: 800 * time.Millisecond, ClickSettle: 200 * time.Millisecond,
		StreamerStart: 300 * time.Millisecond,
	}
}

func startFake(t testing.TB, opts kvmdtest.Options) *kvmdtest.Server {
	t.Helper()
	srv, err := kvmdtest.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// logBuffer keeps a bench's log lines for the secrets check.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	texts.Lock()
	texts.b.Write(p)
	texts.Unlock()
	return l.buf.Write(p)
}

// newBench connects a client to srv with its CA file and the test
// credentials; edit adjusts the config first.
func newBench(t testing.TB, srv *kvmdtest.Server, edit func(*Config)) *Bench {
	t.Helper()
	cfg := Config{
		URL: srv.URL(), User: testUser, Password: testPassword, CAFile: srv.CAFile(),
		Logger: slog.New(slog.NewTextHandler(&logBuffer{}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// seen records an error's text and hint for the secrets check, and
// answers both for the test's own checks.
func seen(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error() + "\nhint: " + backends.HintOf(err)
	texts.Lock()
	texts.b.WriteString(s + "\n")
	texts.Unlock()
	return s
}

func noSecrets(t testing.TB, s string) {
	t.Helper()
	for _, secret := range []string{testPassword, testTOTP} {
		if strings.Contains(s, secret) {
			t.Errorf("a secret appears in %q", s)
		}
	}
}

func screenOf(t testing.TB, b *Bench) *screen {
	t.Helper()
	s, err := b.Console(testContext(t), 0)
	if err != nil {
		t.Fatal(seen(err))
	}
	return s.(*screen)
}

var errTimeout = errors.New("timed out")

// eventually polls cond every 100 ms until it holds or ctx ends.
func eventually(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return errTimeout
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
