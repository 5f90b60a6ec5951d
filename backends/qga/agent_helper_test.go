package qga

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// blockedOnHost are the agent commands a test agent refuses: qemu-ga runs on
// this host, so these would act on the machine running the tests.
const blockedOnHost = "guest-shutdown,guest-suspend-disk,guest-suspend-ram,guest-suspend-hybrid," +
	"guest-set-time,guest-fsfreeze-freeze,guest-fsfreeze-freeze-list,guest-fstrim,guest-set-vcpus," +
	"guest-set-memory-blocks,guest-set-user-password,guest-ssh-add-authorized-keys,guest-ssh-remove-authorized-keys"

type testAgent struct {
	sock string
	cmd  *exec.Cmd
	dir  string
}

// startAgent runs qemu-ga on this host on a unix socket; commands then run here
// as the test's user. It skips the test when qemu-ga is not installed.
func startAgent(t testing.TB) *testAgent {
	t.Helper()
	bin, err := exec.LookPath("qemu-ga")
	if err != nil {
		bin = "/usr/sbin/qemu-ga" // outside root's PATH on Debian
		if _, err := os.Stat(bin); err != nil {
			t.Skip("qemu-ga not installed (apt-get install qemu-guest-agent): skipping a test that needs a real agent")
		}
	}
	dir := shortTempDir(t)
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	a := &testAgent{sock: filepath.Join(dir, "ga.sock"), dir: dir}
	a.cmd = exec.Command(bin, "-m", "unix-listen", "-p", a.sock, "-f", filepath.Join(dir, "ga.pid"),
		"-t", state, "-b", blockedOnHost)
	a.cmd.Stderr = &testLog{t: t}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting qemu-ga: %v", err)
	}
	t.Cleanup(func() {
		a.cmd.Process.Signal(os.Kill)
		a.cmd.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for { // the socket file appears before qemu-ga listens on it
		if conn, err := net.Dial("unix", a.sock); err == nil {
			conn.Close()
			return a
		}
		select {
		case <-ctx.Done():
			t.Fatalf("qemu-ga did not listen on %s", a.sock)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// dial connects a client to the agent and closes it at the end of the test.
func (a *testAgent) dial(t testing.TB) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, a.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// shortTempDir makes a directory for unix sockets, whose paths must stay under
// 108 bytes (t.TempDir can be longer).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qga")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a cap for a loaded machine, not a target
	t.Cleanup(cancel)
	return ctx
}

// testLog passes a child's stderr to the test log.
type testLog struct{ t testing.TB }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Logf("qemu-ga: %s", p)
	return len(p), nil
}
