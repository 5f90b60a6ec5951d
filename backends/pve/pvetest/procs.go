package pvetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/qga"
)

// blockedOnHost are the agent commands the test agent refuses: it runs on
// this host, so these would act on the machine running the tests.
const blockedOnHost = "guest-shutdown,guest-suspend-disk,guest-suspend-ram,guest-suspend-hybrid," +
	"guest-set-time,guest-fsfreeze-freeze,guest-fsfreeze-freeze-list,guest-fstrim,guest-set-vcpus," +
	"guest-set-memory-blocks,guest-set-user-password,guest-ssh-add-authorized-keys,guest-ssh-remove-authorized-keys"

// agentProc is the real qemu-ga every VM's agent endpoints forward to.
type agentProc struct {
	sock string
	cmd  *exec.Cmd

	mu     sync.Mutex
	client *qga.Client
}

// startAgent runs qemu-ga on this host on a unix socket, skipping the test
// when it is not installed.
func startAgent(t testing.TB) *agentProc {
	t.Helper()
	bin, err := exec.LookPath("qemu-ga")
	if err != nil {
		bin = "/usr/sbin/qemu-ga" // outside a user's PATH on Debian
		if _, err := os.Stat(bin); err != nil {
			t.Skip("pvetest: qemu-ga is not installed (apt-get install qemu-guest-agent); this test needs a real agent")
		}
	}
	dir := shortTempDir(t)
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{sock: filepath.Join(dir, "ga.sock")}
	a.cmd = exec.Command(bin, "-m", "unix-listen", "-p", a.sock, "-f", filepath.Join(dir, "ga.pid"),
		"-t", state, "-b", blockedOnHost)
	a.cmd.Stderr = &lockedBuffer{b: &bytes.Buffer{}}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("pvetest: starting qemu-ga: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		a.mu.Lock()
		if a.client != nil {
			a.client.Close()
		}
		a.mu.Unlock()
		_ = a.cmd.Process.Kill()
		<-exited
	})
	if err := waitSocket(a.sock, exited, 10*time.Second); err != nil {
		t.Fatalf("pvetest: qemu-ga: %v", err)
	}
	return a
}

// conn answers the agent connection, dialling again after a broken one.
func (a *agentProc) conn(ctx context.Context) (*qga.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		return a.client, nil
	}
	c, err := qga.Dial(ctx, a.sock)
	if err != nil {
		return nil, err
	}
	a.client = c
	return c, nil
}

// drop forgets a client whose connection broke.
func (a *agentProc) drop(c *qga.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client == c {
		a.client.Close()
		a.client = nil
	}
}

// AgentSocket is the unix socket of the real qemu-ga ("" without one).
func (s *Server) AgentSocket() string {
	if s.agent == nil {
		return ""
	}
	return s.agent.sock
}

// qemuProc is the one real QEMU whose VNC server every console proxies to.
type qemuProc struct {
	vnc      string
	password string
	cmd      *exec.Cmd
}

// startQEMU starts a bare machine (SeaBIOS draws the screen) with a VNC
// server on a unix socket and a password, skipping the test without QEMU.
func startQEMU(t testing.TB) *qemuProc {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("pvetest: qemu-system-x86_64 is not installed; this test needs a real QEMU VNC server")
	}
	dir := shortTempDir(t)
	q := &qemuProc{vnc: filepath.Join(dir, "vnc.sock"), password: randomPassword()}
	// The password travels on the command line only inside this test.
	q.cmd = exec.Command(bin, "-nodefaults", "-machine", "pc", "-accel", "tcg", "-m", "64", "-vga", "std",
		"-display", "none", "-vnc", "unix:"+q.vnc+",password-secret=sec0",
		"-object", "secret,id=sec0,data="+q.password)
	stderr := &lockedBuffer{b: &bytes.Buffer{}}
	q.cmd.Stderr = stderr
	if err := q.cmd.Start(); err != nil {
		t.Fatalf("pvetest: starting QEMU: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = q.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = q.cmd.Process.Kill()
		<-exited
	})
	if err := waitSocket(q.vnc, exited, 30*time.Second); err != nil {
		t.Fatalf("pvetest: QEMU: %v: %s", err, stderr.String())
	}
	return q
}

// VNCSocket is the unix socket of the real QEMU VNC server ("" without
// one), and VNCPassword its password.
func (s *Server) VNCSocket() string {
	if s.console == nil {
		return ""
	}
	return s.console.vnc
}

// VNCPassword is the VNC password the QEMU asks for; vncproxy answers it as
// the generated password.
func (s *Server) VNCPassword() string { return s.vncPassword }

// QEMUPID is the process id of the real QEMU (0 without one).
func (s *Server) QEMUPID() int {
	if s.console == nil {
		return 0
	}
	return s.console.cmd.Process.Pid
}

func randomPassword() string {
	const alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	buf := make([]byte, 8)
	_, _ = rand.Read(buf)
	for i := range buf {
		buf[i] = alphabet[int(buf[i])%len(alphabet)]
	}
	return string(buf)
}

// waitSocket waits until something listens on a unix socket (the file
// appears before the process listens).
func waitSocket(path string, exited <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("the process exited before listening on " + path)
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("nothing listens on " + path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shortTempDir makes a directory for unix sockets, whose paths must stay
// under 108 bytes (t.TempDir can be longer).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pvet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
