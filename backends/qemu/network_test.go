package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/internal/testvm"
)

func skipWithoutVDE(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"vde_switch", "slirpvde"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (apt-get install vde2): skipping a test of stand networks", bin)
		}
	}
}

func TestNetworkNames(t *testing.T) {
	for _, name := range []string{"a", "stand-1", "0x", strings.Repeat("n", 63)} {
		if err := validNetwork(name); err != nil {
			t.Errorf("%q refused: %v", name, err)
		}
	}
	for _, name := range []string{"", "-a", "A", "a_b", "a.b", "a/b", strings.Repeat("n", 64)} {
		if err := validNetwork(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
	// A name too long for a socket path under the run dir gets a hashed
	// directory instead, still one per name.
	l := layout{run: "/tmp/" + strings.Repeat("r", 40)}
	a, err := l.network(strings.Repeat("a", 63))
	if err != nil || len(a.sock) > maxVDESocketDir || strings.Contains(a.sock, "aaaa") {
		t.Fatalf("long name: %+v, %v", a, err)
	}
	if b, _ := l.network(strings.Repeat("a", 62) + "b"); b.dir == a.dir {
		t.Fatalf("two names share %s", a.dir)
	}
	if _, err := (layout{run: "/" + strings.Repeat("r", 90)}).network("a"); err == nil || !strings.Contains(err.Error(), "run directory") {
		t.Fatalf("run dir too long: err = %v", err)
	}
}

// A VM without a network, and a vm.toml from before stands, keep QEMU's
// user networking and its default MAC; a stand VM plugs into the switch
// with a MAC of its own.
func TestNetworkArgs(t *testing.T) {
	d := newDriver(t, testvm.ShortTempDir(t))
	old := filepath.Join(t.TempDir(), "vm.toml")
	os.WriteFile(old, []byte("vmid = 101\nname = \"x-old\"\nmemory_mb = 64\ncores = 1\nfirmware = \"bios\"\n"), 0o644)
	c, err := readVMConfig(old)
	if err != nil || c.Network != "" {
		t.Fatalf("old vm.toml: %+v, %v", c, err)
	}
	args := strings.Join(d.qemuArgs(c, ""), " ")
	if !strings.Contains(args, "-netdev user,id=net0 -device virtio-net-pci,netdev=net0 ") {
		t.Fatalf("no network: %s", args)
	}
	c.Network = "stand-1"
	n, _ := d.l.network("stand-1")
	args = strings.Join(d.qemuArgs(c, ""), " ")
	if !strings.Contains(args, "-netdev hubport,id=net0,hubid=0 -device virtio-net-pci,netdev=net0,mac=52:54:00:00:00:65 ") ||
		!strings.HasSuffix(args, " -netdev vde,id=vde0,sock="+n.sock+" -netdev hubport,id=up0,hubid=0,netdev=vde0") {
		t.Fatalf("stand network: %s", args)
	}
	if _, _, err := d.Clone(context.Background(), backends.CloneRequest{Template: 1, Name: "x-a", Network: "Bad_Net"}); err == nil || !strings.Contains(err.Error(), "Bad_Net") {
		t.Fatalf("bad network name: err = %v", err)
	}
}

// vdeDaemons lists the live vde_switch and slirpvde processes serving sock.
func vdeDaemons(sock string) []int {
	return append(daemonsOn("vde_switch", sock), daemonsOn("slirpvde", sock)...)
}

// Two VMs of a stand starting at one moment start one switch and one
// slirpvde; a stale pidfile (naming a live process that is not the switch)
// does not pass for a running network; a slirpvde no pidfile names is
// stopped when the network's is started again; leaving stops both.
func TestNetworkDaemons(t *testing.T) {
	skipWithoutVDE(t)
	d := newDriver(t, testvm.ShortTempDir(t))
	ctx := context.Background()
	n, _ := d.l.network("stand-d")
	t.Cleanup(func() {
		for _, pid := range vdeDaemons(n.sock) {
			stopDaemon(ctx, pid)
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = d.joinNetwork(ctx, "stand-d") })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if pids := vdeDaemons(n.sock); len(pids) != 2 {
		t.Fatalf("after 4 joins at once: daemons %v, want one switch and one slirpvde", pids)
	}
	if err := d.leaveNetwork(ctx, "stand-d"); err != nil {
		t.Fatal(err)
	}
	if pids := vdeDaemons(n.sock); len(pids) != 0 {
		t.Fatalf("after leaving: daemons %v still run", pids)
	}
	if _, err := os.Stat(n.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left behind (%v)", n.dir, err)
	}

	os.MkdirAll(n.dir, 0o700)
	self := []byte(strconv.Itoa(os.Getpid()))
	os.WriteFile(n.switchPidfile(), self, 0o644)
	os.WriteFile(n.slirpPidfile(), self, 0o644)
	if err := d.joinNetwork(ctx, "stand-d"); err != nil {
		t.Fatal(err)
	}
	if pids := vdeDaemons(n.sock); len(pids) != 2 {
		t.Fatalf("after a join over stale pidfiles: daemons %v", pids)
	}

	// A slirpvde whose start outlived startDaemon's wait: plugged in, but
	// its pidfile never written (or written over by the next start).
	// Restarting a dead slirpvde must not leave it as a second one.
	late := exec.Command("slirpvde", "-d", "-q", "--dhcp", "-s", n.sock)
	if out, err := late.CombinedOutput(); err != nil {
		t.Fatalf("slirpvde by hand: %v %s", err, out)
	}
	named, _ := n.slirpPid()
	syscall.Kill(named, syscall.SIGKILL)
	waitGone(ctx, named, 5*time.Second)
	if err := d.joinNetwork(ctx, "stand-d"); err != nil {
		t.Fatal(err)
	}
	now, _ := n.slirpPid()
	if pids := daemonsOn("slirpvde", n.sock); len(pids) != 1 || pids[0] != now {
		t.Fatalf("after restarting a dead slirpvde beside a late one: slirpvde %v, the pidfile names %d", pids, now)
	}
	if err := d.leaveNetwork(ctx, "stand-d"); err != nil {
		t.Fatal(err)
	}
	if pids := vdeDaemons(n.sock); len(pids) != 0 {
		t.Fatalf("after leaving: daemons %v still run", pids)
	}
}

// memberConfig writes the vm.toml of a stopped VM on network.
func memberConfig(t *testing.T, d *Driver, vmid int, network string) {
	t.Helper()
	c := vmConfig{VMID: vmid, Name: fmt.Sprintf("x-repro-m%d", vmid), MemoryMB: 64, Cores: 1, Firmware: "bios", Network: network}
	os.MkdirAll(d.l.vmDir(vmid), 0o755)
	if err := c.write(d.l.vmConfig(vmid)); err != nil {
		t.Fatal(err)
	}
}

// askLease answers the address slirpvde offers mac now.
func askLease(t *testing.T, n network, mac string) string {
	t.Helper()
	ips, err := dhcpLeases(context.Background(), n.sock, []string{mac})
	if err != nil {
		t.Fatal(err)
	}
	return ips[0].String()
}

// A slirpvde killed with SIGKILL starts again (over its stale pidfile)
// with the leases it had: every member VM, running or not, keeps its
// address, a slot nobody known had stays taken, and a new VM gets a free
// one, never an address given out before.
func TestNetworkLeasesSurviveSlirp(t *testing.T) {
	skipWithoutVDE(t)
	d := newDriver(t, testvm.ShortTempDir(t))
	ctx := context.Background()
	n, _ := d.l.network("stand-l")
	t.Cleanup(func() {
		for _, pid := range vdeDaemons(n.sock) {
			stopDaemon(ctx, pid)
		}
	})
	memberConfig(t, d, 101, "stand-l")
	memberConfig(t, d, 102, "stand-l")
	if err := d.joinNetwork(ctx, "stand-l"); err != nil {
		t.Fatal(err)
	}
	// A client poligon did not ask for (a guest's second NIC, say).
	if ip := askLease(t, n, "02:00:00:00:aa:01"); ip != "10.0.2.17" {
		t.Fatalf("a foreign MAC got %s, want 10.0.2.17", ip)
	}
	memberConfig(t, d, 103, "stand-l")
	if err := d.joinNetwork(ctx, "stand-l"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{vmMAC(101): "10.0.2.15", vmMAC(102): "10.0.2.16", vmMAC(103): "10.0.2.18"}
	for mac, ip := range want {
		if got := askLease(t, n, mac); got != ip {
			t.Fatalf("before the kill: %s has %s, want %s", mac, got, ip)
		}
	}

	slirp, _ := n.slirpPid()
	syscall.Kill(slirp, syscall.SIGKILL)
	waitGone(ctx, slirp, 5*time.Second)
	memberConfig(t, d, 104, "stand-l")
	if err := d.joinNetwork(ctx, "stand-l"); err != nil {
		t.Fatalf("join after slirpvde was killed: %v", err)
	}
	if now, ok := n.slirpPid(); !ok || now == slirp {
		t.Fatalf("slirpvde not started again (pid %d, was %d)", now, slirp)
	}
	want[vmMAC(104)] = "10.0.2.19"
	for mac, ip := range want {
		if got := askLease(t, n, mac); got != ip {
			t.Errorf("after the restart: %s has %s, want %s", mac, got, ip)
		}
	}
}

// Without vde2, Start of a stand VM fails at once, saying what to install.
func TestNetworkWithoutVDE(t *testing.T) {
	d := newDriver(t, testvm.ShortTempDir(t))
	c := vmConfig{VMID: 100, Name: "x-repro-net", MemoryMB: 64, Cores: 1, Firmware: "bios", Network: "stand-x"}
	os.MkdirAll(d.l.vmDir(c.VMID), 0o755)
	if err := c.write(d.l.vmConfig(c.VMID)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	_, err := d.Start(context.Background(), c.VMID)
	if err == nil || !strings.Contains(err.Error(), "vde_switch") || !strings.Contains(err.Error(), "apt-get install vde2") {
		t.Fatalf("start without vde2: err = %v", err)
	}
	if err := d.joinNetwork(context.Background(), "stand-x"); err == nil || !strings.Contains(err.Error(), "apt-get install vde2") {
		t.Fatalf("join without vde2: err = %v", err)
	}
}

// TestStandNetwork boots two VMs on one network and one without: A and B
// get their own addresses by DHCP, B fetches a page A serves, both stand VM
// and plain VM reach the host's loopback at 10.0.2.2, and destroying the
// last stand VM stops the network.
func TestStandNetwork(t *testing.T) {
	skipWithoutVDE(t)
	d := newDriver(t, testvm.DataDir(t))
	ctx := context.Background()
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "page-from-host")
	}))
	defer host.Close()
	_, port, _ := net.SplitHostPort(host.Listener.Addr().String())

	vmids, ips := bootVMs(t, d, []string{"x-repro-net-a", "x-repro-net-b", "x-repro-plain"}, []string{"stand-t", "stand-t", ""})
	a, b, plain := vmids[0], vmids[1], vmids[2]
	if ips[0] == ips[1] {
		t.Fatalf("A and B share the address %s", ips[0])
	}
	if ifs, _ := d.Interfaces(ctx, a); macOf(ifs, "eth0") != vmMAC(a) {
		t.Errorf("A's eth0 MAC = %q, want %s", macOf(ifs, "eth0"), vmMAC(a))
	}

	if st := sh(t, d, a, "mkdir -p /tmp/www && echo page-from-a > /tmp/www/index.html && busybox httpd -p 80 -h /tmp/www"); st.ExitCode != 0 {
		t.Fatalf("httpd on A: %+v %s", st, st.Stderr)
	}
	fetch(t, d, b, "http://"+ips[0]+"/", "page-from-a")
	fetch(t, d, b, "http://10.0.2.2:"+port+"/", "page-from-host")
	fetch(t, d, plain, "http://10.0.2.2:"+port+"/", "page-from-host")
	// NAT to an address off the segment: the host's own, when it has one.
	if ip := hostIPv4(); ip != "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: host.Config.Handler}
		go srv.Serve(ln)
		defer srv.Close()
		fetch(t, d, b, "http://"+ln.Addr().String()+"/", "page-from-host")
	} else {
		t.Log("the host has no IPv4 address but loopback: NAT to an outside address not tried")
	}

	n, _ := d.l.network("stand-t")
	if pids := vdeDaemons(n.sock); len(pids) != 2 {
		t.Fatalf("stand-t daemons: %v, want a switch and a slirpvde", pids)
	}
	destroy := func(vmid int) {
		task, err := d.Destroy(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, d, task)
	}
	destroy(a)
	if pids := vdeDaemons(n.sock); len(pids) != 2 {
		t.Fatalf("after destroying A, B is still on stand-t, but daemons are %v", pids)
	}
	destroy(b)
	if pids := vdeDaemons(n.sock); len(pids) != 0 {
		t.Fatalf("after destroying the last VM of stand-t: daemons %v still run", pids)
	}
	if _, err := os.Stat(n.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left behind (%v)", n.dir, err)
	}
}

// bootVMs clones the tiny template once per name, onto its network, boots
// the clones at once (so they also join their network at once) and answers
// their vmids and eth0 addresses. The clones are destroyed after the test.
func bootVMs(t *testing.T, d *Driver, names, networks []string) ([]int, []string) {
	t.Helper()
	ctx := context.Background()
	vmids := make([]int, len(names))
	for i, name := range names {
		vmid, task, err := d.Clone(ctx, backends.CloneRequest{Template: tinyVMID, Name: name, Network: networks[i]})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, d, task)
		destroyLater(t, d, vmid)
		if c, _ := d.config(vmid); c.Network != networks[i] {
			t.Fatalf("vm.toml of %s: network %q, want %q", name, c.Network, networks[i])
		}
		vmids[i] = vmid
	}
	start := time.Now()
	ips := make([]string, len(vmids))
	var wg sync.WaitGroup
	for i, vmid := range vmids {
		task, err := d.Start(ctx, vmid)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			st, err := d.WaitTask(wctx, task.ID)
			if err != nil || st.Running || st.Failed() {
				t.Errorf("start %s: %+v, %v", names[i], st, err)
				return
			}
			var agent time.Duration
			ips[i], agent = waitIPv4(t, d, vmid, start)
			t.Logf("%s: %s; from start: agent %v, address %v", names[i], ips[i], agent.Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return vmids, ips
}

// hostPage serves "page-from-host" on the host's loopback and answers its
// port, which stand VMs reach at 10.0.2.2.
func hostPage(t *testing.T) string {
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "page-from-host")
	}))
	t.Cleanup(host.Close)
	_, port, _ := net.SplitHostPort(host.Listener.Addr().String())
	return port
}

// restarted waits until the network's daemon (pid answers it) runs again
// under a pid other than was: the supervisor started it again.
func restarted(t *testing.T, pid func() (int, bool), was int, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if now, ok := pid(); ok && now != was {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was killed and is not running again after 30 s", what)
		}
	}
}

// A slirpvde killed under two running stand VMs is started again by the
// supervisor with the leases it had: A still reaches the host through it,
// a VM started afterwards gets an address neither A nor B holds, and
// slirpvde still offers A its own address.
func TestStandNetworkSlirpKilled(t *testing.T) {
	skipWithoutVDE(t)
	d := newDriver(t, testvm.DataDir(t))
	port := hostPage(t)
	vmids, ips := bootVMs(t, d, []string{"x-repro-sk-a", "x-repro-sk-b"}, []string{"stand-s", "stand-s"})
	a := vmids[0]
	n, _ := d.l.network("stand-s")
	slirp, _ := n.slirpPid()
	syscall.Kill(slirp, syscall.SIGKILL)
	restarted(t, n.slirpPid, slirp, "slirpvde")
	t.Cleanup(func() {
		if t.Failed() {
			netDiagnosis(t, d, n, vmids)
		}
	})
	fetch(t, d, a, "http://10.0.2.2:"+port+"/", "page-from-host")

	c, cips := bootVMs(t, d, []string{"x-repro-sk-c"}, []string{"stand-s"})
	if cips[0] == ips[0] || cips[0] == ips[1] {
		t.Fatalf("C (vmid %d) got %s, which A or B (%v) holds", c[0], cips[0], ips)
	}
	if got := askLease(t, n, vmMAC(a)); got != ips[0] {
		t.Fatalf("slirpvde offers A %s, but A holds %s", got, ips[0])
	}
}

// A vde_switch killed under two running stand VMs is started again on the
// same sockets and the VMs are plugged into it without a restart: B fetches
// a page A serves and A reaches the host, from the same QEMU processes.
func TestStandNetworkSwitchKilled(t *testing.T) {
	skipWithoutVDE(t)
	d := newDriver(t, testvm.DataDir(t))
	port := hostPage(t)
	vmids, ips := bootVMs(t, d, []string{"x-repro-wk-a", "x-repro-wk-b"}, []string{"stand-w", "stand-w"})
	a, b := vmids[0], vmids[1]
	if st := sh(t, d, a, "mkdir -p /tmp/www && echo page-from-a > /tmp/www/index.html && busybox httpd -p 80 -h /tmp/www"); st.ExitCode != 0 {
		t.Fatalf("httpd on A: %+v %s", st, st.Stderr)
	}
	fetch(t, d, b, "http://"+ips[0]+"/", "page-from-a")
	qa, _ := d.pid(a)
	qb, _ := d.pid(b)

	n, _ := d.l.network("stand-w")
	sw, _ := n.switchPid()
	syscall.Kill(sw, syscall.SIGKILL)
	restarted(t, n.switchPid, sw, "vde_switch")
	t.Cleanup(func() {
		if t.Failed() {
			netDiagnosis(t, d, n, vmids)
		}
	})
	fetch(t, d, b, "http://"+ips[0]+"/", "page-from-a")
	fetch(t, d, a, "http://10.0.2.2:"+port+"/", "page-from-host")
	if now, _ := d.pid(a); now != qa {
		t.Errorf("A's QEMU is pid %d, was %d: restarted", now, qa)
	}
	if now, _ := d.pid(b); now != qb {
		t.Errorf("B's QEMU is pid %d, was %d: restarted", now, qb)
	}
}

// waitIPv4 answers eth0's IPv4 address once DHCP gave it one, and when
// (since start) the guest agent first answered.
func waitIPv4(t *testing.T, d *Driver, vmid int, start time.Time) (string, time.Duration) {
	t.Helper()
	var agent time.Duration
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ifs, err := d.Interfaces(ctx, vmid)
		cancel()
		if err == nil && agent == 0 {
			agent = time.Since(start)
		}
		for _, i := range ifs {
			for _, a := range i.Addresses {
				if i.Name == "eth0" && a.IP.To4() != nil {
					return a.IP.String(), agent
				}
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("vmid %d: no IPv4 on eth0 in 2 minutes (interfaces %+v, %v)", vmid, ifs, err)
			return "", agent
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hostIPv4 answers one of the host's IPv4 addresses outside loopback and
// outside slirp's 10.0.2.0/24, or "".
func hostIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	_, slirp, _ := net.ParseCIDR("10.0.2.0/24")
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !slirp.Contains(n.IP) {
			return n.IP.String()
		}
	}
	return ""
}

func macOf(ifs []backends.Interface, name string) string {
	for _, i := range ifs {
		if i.Name == name {
			return i.MAC
		}
	}
	return ""
}

// fetch runs wget in the guest until it answers want (a server just
// started may need a moment) or 30 s pass. Not wget -T: busybox-static
// 1.35's wget dies of SIGSEGV with it; timeout(1) bounds it instead.
func fetch(t *testing.T, d *Driver, vmid int, url, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := sh(t, d, vmid, "timeout 10 wget -qO- "+url)
		if strings.TrimSpace(string(st.Stdout)) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vmid %d: wget %s = %q (exit %d, signal %d, %s), want %q", vmid, url, st.Stdout, st.ExitCode, st.Signal, st.Stderr, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// netDiagnosis logs what a failed stand network test needs to tell where
// frames stop: the switch's ports and MAC table, each QEMU's view of its
// network clients, and each guest's neighbours and interface counters.
func netDiagnosis(t *testing.T, d *Driver, n network, vmids []int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sw, _ := os.ReadFile(n.switchPidfile())
	sl, _ := os.ReadFile(n.slirpPidfile())
	t.Logf("pidfiles: vde_switch %q, slirpvde %q; running: vde_switch %v, slirpvde %v",
		sw, sl, daemonsOn("vde_switch", n.sock), daemonsOn("slirpvde", n.sock))
	for _, cmd := range []string{"port/allprint", "hash/print"} {
		out, err := switchCommand(ctx, n.switchConsole(), cmd)
		t.Logf("vde_switch %s (err %v):\n%s", cmd, err, out)
	}
	for _, id := range vmids {
		var info string
		err := d.monitorDo(ctx, id, func(c *qmp.Client) (err error) {
			info, err = c.HumanMonitorCommand(ctx, "info network")
			return err
		})
		t.Logf("vmid %d (MAC %s) info network (err %v):\n%s", id, vmMAC(id), err, info)
		st := sh(t, d, id, "ip neigh; cat /proc/net/dev")
		t.Logf("vmid %d guest:\n%s%s", id, st.Stdout, st.Stderr)
	}
}

// switchCommand runs one command on a vde_switch's management console
// and answers its output, up to the console's "1000 Success" (or error
// code) line.
func switchCommand(ctx context.Context, path, cmd string) (string, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	r := bufio.NewReader(c)
	// The banner ends with the prompt "vde$ ", which has no newline.
	for prompt := []byte("vde$ "); ; {
		b, err := r.ReadByte()
		if err != nil {
			return "", fmt.Errorf("console banner: %w", err)
		}
		if b == prompt[0] {
			if next, _ := r.Peek(len(prompt) - 1); string(next) == string(prompt[1:]) {
				r.Discard(len(prompt) - 1)
				break
			}
		}
	}
	if _, err := fmt.Fprintf(c, "%s\n", cmd); err != nil {
		return "", err
	}
	var out strings.Builder
	for {
		line, err := r.ReadString('\n')
		out.WriteString(line)
		if err != nil {
			return out.String(), err
		}
		if len(line) > 5 && line[4] == ' ' && line[0] >= '1' && line[0] <= '9' && strings.Trim(line[:4], "0123456789") == "" {
			return out.String(), nil
		}
	}
}
