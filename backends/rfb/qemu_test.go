package rfb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// qemuVM is a QEMU process with its VNC server and human monitor on unix
// sockets in a short temporary directory.
type qemuVM struct {
	dir     string
	vnc     string // VNC socket path
	monitor string // HMP socket path
	serial  string // serial socket path, if asked for
	cmd     *exec.Cmd
}

type qemuOptions struct {
	password   string   // VNC auth password; empty for security None
	paused     bool     // -S
	ovmf       bool     // boot OVMF instead of SeaBIOS
	serial     bool     // serial port on a unix socket (server, nowait)
	vncOptions string   // appended to the -vnc option (",key-delay-ms=5")
	extra      []string // more arguments
}

// shortTempDir makes a directory whose socket paths stay under the 108-byte
// limit of unix socket names (t.TempDir() can be too long).
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rfb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func qemuBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 is not installed; this test needs a real QEMU VNC server")
	}
	return bin
}

// startQEMU starts a machine with no guest: SeaBIOS (or OVMF) draws the
// screen. It is killed in the test's cleanup.
func startQEMU(t testing.TB, o qemuOptions) *qemuVM {
	t.Helper()
	bin := qemuBinary(t)
	vm := &qemuVM{dir: shortTempDir(t)}
	vm.vnc = filepath.Join(vm.dir, "vnc.sock")
	vm.monitor = filepath.Join(vm.dir, "mon.sock")
	vnc := "unix:" + vm.vnc
	args := []string{"-nodefaults", "-machine", "pc", "-accel", "tcg", "-m", "128", "-vga", "std",
		"-display", "none", "-monitor", "unix:" + vm.monitor + ",server=on,wait=off"}
	if o.password != "" {
		vnc += ",password-secret=sec0"
		args = append(args, "-object", "secret,id=sec0,data="+o.password)
	}
	args = append(args, "-vnc", vnc+o.vncOptions)
	if o.paused {
		args = append(args, "-S")
	}
	if o.ovmf {
		const ovmf = "/usr/share/OVMF/OVMF_CODE.fd"
		if _, err := os.Stat(ovmf); err != nil {
			t.Skip("OVMF is not installed (" + ovmf + "); this test needs UEFI firmware")
		}
		args = append(args, "-bios", ovmf)
	}
	if o.serial {
		vm.serial = filepath.Join(vm.dir, "serial.sock")
		args = append(args, "-serial", "unix:"+vm.serial+",server=on,wait=off")
	}
	args = append(args, o.extra...)
	vm.cmd = exec.Command(bin, args...)
	var stderr bytes.Buffer
	vm.cmd.Stderr = &stderr
	if err := vm.cmd.Start(); err != nil {
		t.Fatalf("starting QEMU: %v", err)
	}
	exited := make(chan struct{})
	go func() { vm.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		vm.cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", vm.vnc); err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("QEMU exited: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("QEMU's VNC socket did not appear: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return vm
}

// hmp runs a human monitor command and answers its output.
func (vm *qemuVM) hmp(t testing.TB, command string) string {
	t.Helper()
	c, err := net.Dial("unix", vm.monitor)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	readPrompt := func() string {
		var out strings.Builder
		for !strings.HasSuffix(out.String(), "(qemu) ") {
			b, err := r.ReadByte()
			if err != nil {
				t.Fatalf("monitor read: %v (so far %q)", err, out.String())
			}
			out.WriteByte(b)
		}
		return out.String()
	}
	readPrompt() // banner
	fmt.Fprintf(c, "%s\n", command)
	out := readPrompt()
	// The monitor echoes the command line (with terminal escapes) first.
	if i := strings.Index(out, "\r\n"); i >= 0 {
		out = out[i+2:]
	}
	return strings.TrimSuffix(out, "(qemu) ")
}

// dialer answers a Dialer for the VM's VNC socket.
func (vm *qemuVM) dialer() Dialer {
	return unixDialer(vm.vnc)
}

func unixDialer(path string) Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// screendump answers QEMU's own picture of the screen (HMP screendump, PPM).
func (vm *qemuVM) screendump(t testing.TB) *image.RGBA {
	t.Helper()
	path := filepath.Join(vm.dir, "dump.ppm")
	if out := vm.hmp(t, "screendump "+path); strings.TrimSpace(out) != "" {
		t.Fatalf("screendump: %s", out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := parsePPM(data)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func parsePPM(data []byte) (*image.RGBA, error) {
	var w, h, maxv int
	r := bytes.NewReader(data)
	if _, err := fmt.Fscanf(r, "P6\n%d %d\n%d\n", &w, &h, &maxv); err != nil || maxv != 255 {
		return nil, fmt.Errorf("not a P6 PPM of 8-bit samples: %v", err)
	}
	px := data[len(data)-r.Len():]
	if len(px) < 3*w*h {
		return nil, fmt.Errorf("PPM is short: %d bytes for %dx%d", len(px), w, h)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < w*h; i++ {
		copy(img.Pix[4*i:], px[3*i:3*i+3])
		img.Pix[4*i+3] = 0xff
	}
	return img, nil
}

// waitFrame waits until the client's frame satisfies ok.
func waitFrame(t testing.TB, c *Client, timeout time.Duration, what string, ok func(*image.RGBA) bool) *image.RGBA {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ch := c.Updated()
		f, _, err := c.Frame(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(f) {
			return f
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: timed out; the screen is %dx%d", what, f.Rect.Dx(), f.Rect.Dy())
		}
	}
}

func connect(t testing.TB, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sameFrame reports whether two frames have the same size and pixels.
func sameFrame(a, b *image.RGBA) bool {
	return a.Rect == b.Rect && bytes.Equal(a.Pix, b.Pix)
}

func notBlack(f *image.RGBA) bool {
	for i := 0; i < len(f.Pix); i += 4 {
		if f.Pix[i]|f.Pix[i+1]|f.Pix[i+2] != 0 {
			return true
		}
	}
	return false
}

// TestQEMUHandshakeNoneRawAndZRLE connects to SeaBIOS's screen with security
// None, once with Raw and once with ZRLE, and checks both frames against
// QEMU's own screendump of the stopped machine, pixel for pixel.
func TestQEMUHandshakeNoneRawAndZRLE(t *testing.T) {
	vm := startQEMU(t, qemuOptions{})
	raw := connect(t, Config{Dial: vm.dialer(), Encodings: []int32{EncodingRaw}})
	zrle := connect(t, Config{Dial: vm.dialer(), Encodings: []int32{EncodingZRLE}})
	for _, c := range []*Client{raw, zrle} {
		// QEMU shows a 640x480 placeholder until SeaBIOS sets the 720x400
		// text mode: a resize.
		waitFrame(t, c, 60*time.Second, "SeaBIOS's text screen", func(f *image.RGBA) bool {
			return f.Rect.Dx() == 720 && f.Rect.Dy() == 400 && notBlack(f)
		})
	}
	vm.hmp(t, "stop") // the text cursor blinks while the machine runs
	dump := vm.screendump(t)
	for name, c := range map[string]*Client{"raw": raw, "zrle": zrle} {
		waitFrame(t, c, 10*time.Second, name+" frame equal to the screendump", func(f *image.RGBA) bool {
			return sameFrame(f, dump)
		})
	}
}

func TestQEMUVNCAuth(t *testing.T) {
	const password = "s3cr3t!x"
	vm := startQEMU(t, qemuOptions{password: password, paused: true})
	c := connect(t, Config{Dial: vm.dialer(), Password: password})
	if w, h := c.Size(); w == 0 || h == 0 {
		t.Fatalf("no screen after VNC auth: %dx%d", w, h)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Connect(ctx, Config{Dial: vm.dialer(), Password: "wrongpw1"})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong password: %v, want ErrAuth", err)
	}
	if strings.Contains(err.Error(), "wrongpw1") || strings.Contains(err.Error(), password) {
		t.Fatalf("the error shows a password: %v", err)
	}
	if strings.Contains(err.Error(), "\x00") {
		t.Errorf("the error carries QEMU's NUL: %q", err)
	}
	t.Logf("wrong password: %v", err)

	_, err = Connect(ctx, Config{Dial: vm.dialer()})
	if err == nil || !strings.Contains(err.Error(), "requires a password") {
		t.Errorf("no password: %v", err)
	}
}

// TestQEMUResolutionChangeOVMF boots UEFI firmware, which switches from the
// text screen to graphics; the client follows, and Raw and ZRLE decode the
// colourful graphics screen exactly as QEMU's screendump shows it.
func TestQEMUResolutionChangeOVMF(t *testing.T) {
	vm := startQEMU(t, qemuOptions{ovmf: true})
	raw := connect(t, Config{Dial: vm.dialer(), Encodings: []int32{EncodingRaw}})
	zrle := connect(t, Config{Dial: vm.dialer(), Encodings: []int32{EncodingZRLE}})
	first, _, err := raw.Frame(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{raw, zrle} {
		f := waitFrame(t, c, 120*time.Second, "OVMF's graphics mode", func(f *image.RGBA) bool {
			return f.Rect.Dx() >= 800 && notBlack(f)
		})
		t.Logf("screen went from %dx%d to %dx%d", first.Rect.Dx(), first.Rect.Dy(), f.Rect.Dx(), f.Rect.Dy())
	}
	vm.hmp(t, "stop")
	dump := vm.screendump(t)
	for name, c := range map[string]*Client{"raw": raw, "zrle": zrle} {
		waitFrame(t, c, 10*time.Second, name+" frame equal to the screendump", func(f *image.RGBA) bool {
			return sameFrame(f, dump)
		})
	}
}

// proxy forwards unix connections to QEMU's VNC socket and can cut them.
type proxy struct {
	path   string
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	accept int
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	p := &proxy{path: filepath.Join(shortTempDir(t), "proxy.sock")}
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.accept++
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accept
}

// TestQEMUReconnect cuts the connection under a running client: it redials,
// Frame keeps answering, and typing in flight completes.
func TestQEMUReconnect(t *testing.T) {
	vm := startQEMU(t, qemuOptions{})
	px := startProxy(t, vm.vnc)
	c := connect(t, Config{Dial: unixDialer(px.path), KeyDelay: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	typed := make(chan error, 1)
	go func() { typed <- c.Type(ctx, strings.Repeat("reconnect ", 20)) }()
	time.Sleep(200 * time.Millisecond)
	px.cut()
	if _, _, err := c.Frame(ctx); err != nil {
		t.Fatalf("Frame right after the cut: %v", err)
	}
	if err := <-typed; err != nil {
		t.Fatalf("Type across the cut: %v", err)
	}
	if px.accepted() < 2 {
		t.Fatalf("the client did not redial (%d connections)", px.accepted())
	}
	vm.hmp(t, "stop")
	dump := vm.screendump(t)
	waitFrame(t, c, 10*time.Second, "the frame after the reconnect", func(f *image.RGBA) bool {
		return sameFrame(f, dump)
	})
}
