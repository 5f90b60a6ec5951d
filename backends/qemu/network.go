package qemu

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/poligon/poligon/backends/qmp"
)

// A stand's network is one Ethernet segment shared by the VMs cloned with
// the same CloneRequest.Network: a vde_switch (Debian's vde2) with a
// slirpvde plugged into it. slirpvde is QEMU's user networking as a
// separate process: DHCP from 10.0.2.15, the host's loopback at 10.0.2.2,
// DNS at 10.0.2.3, NAT to the outside. Both daemonize, so the network
// outlives poligon just as the VMs do; no root and no host configuration.
//
// Files, under the private run directory:
//
//	<run>/net.lock              flock held while a network starts or stops
//	<run>/net-<name>/sw/        the switch's sockets (QEMU's -netdev vde,sock=)
//	<run>/net-<name>/*.pid      the daemons' pidfiles
//	<run>/net-<name>/mgmt       the switch's console (unixterm; hash/print, port/allprint)
//	<run>/net-<name>/leases     the address of every MAC (network_dhcp.go)
//
// A supervisor (superviseNetworks) starts again, within a second, a daemon
// of a network with a running VM that died: see ensureNetwork.

var networkName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// vdeHint is said wherever vde2 is missing.
const vdeHint = "install Debian's vde2 package (apt-get install vde2)"

func validNetwork(name string) error {
	if len(name) > 63 || !networkName.MatchString(name) {
		return fmt.Errorf("network name %q: use lowercase letters, digits and dashes, starting with a letter or digit, at most 63 characters", name)
	}
	return nil
}

// network is where one network's daemons keep their files.
type network struct {
	name string
	dir  string
	sock string // the switch's socket directory
}

// maxVDESocketDir leaves room under the 108-byte sun_path for the sockets
// vde puts in its directory ("ctl", "001.6", a client's ".12345-00000").
const maxVDESocketDir = 107 - 16

// network answers the files of a network. The directory is named after
// the network when that fits a unix socket path, else after a hash of it.
func (l layout) network(name string) (network, error) {
	if err := validNetwork(name); err != nil {
		return network{}, err
	}
	dir := filepath.Join(l.run, "net-"+name)
	if len(dir)+len("/sw") > maxVDESocketDir {
		sum := sha256.Sum256([]byte(name))
		dir = filepath.Join(l.run, "net-"+hex.EncodeToString(sum[:6]))
	}
	if len(dir)+len("/sw") > maxVDESocketDir {
		return network{}, fmt.Errorf("network %q: the run directory %s is too long for the switch's unix sockets (at most %d bytes): set a shorter run directory", name, l.run, maxVDESocketDir-len("/net-123456789abc/sw"))
	}
	return network{name: name, dir: dir, sock: filepath.Join(dir, "sw")}, nil
}

func (n network) switchPidfile() string { return filepath.Join(n.dir, "switch.pid") }

// switchConsole is the switch's management socket, where an operator (or
// a test that failed) reads its port and MAC tables: unixterm PATH.
func (n network) switchConsole() string { return filepath.Join(n.dir, "mgmt") }
func (n network) slirpPidfile() string  { return filepath.Join(n.dir, "slirp.pid") }

// switchPid and slirpPid answer the daemon's pid when it is alive and is
// ours: a pidfile is trusted only when the process it names is that program
// serving this socket directory, so a recycled pid never counts.
func (n network) switchPid() (int, bool) { return daemonPid(n.switchPidfile(), "vde_switch", n.sock) }
func (n network) slirpPid() (int, bool)  { return daemonPid(n.slirpPidfile(), "slirpvde", n.sock) }

func daemonPid(pidfile, program, sock string) (int, bool) {
	raw, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 || !isDaemon(pid, program, sock) {
		return 0, false
	}
	return pid, true
}

// isDaemon answers whether pid is a live program serving sock.
func isDaemon(pid int, program, sock string) bool {
	if processGone(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 {
		return false
	}
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if filepath.Base(string(args[0])) != program {
		return false
	}
	return slices.ContainsFunc(args[1:], func(a []byte) bool { return string(a) == sock })
}

// daemonsOn lists every live program serving sock, whatever its pidfile
// says: a start that outlived startDaemon's wait leaves one the pidfile
// does not name.
func daemonsOn(program, sock string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && isDaemon(pid, program, sock) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// vmMAC is a stand VM's MAC address, derived from its vmid: QEMU gives
// every NIC 52:54:00:12:34:56, which on a shared segment would collide.
func vmMAC(vmid int) string {
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", byte(vmid>>16), byte(vmid>>8), byte(vmid))
}

// lockNetworks takes the file lock that serializes starting and stopping
// networks across goroutines and poligon processes (flock locks belong to
// the open file, so two opens in one process exclude each other too).
func (d *Driver) lockNetworks() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(d.l.run, "net.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("network lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("network lock: %w", err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// requireVDE checks that the programs of a network are installed.
func requireVDE(network string) error {
	for _, bin := range []string{"vde_switch", "slirpvde", "vde_plug"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("network %q needs %s, which is not installed: %s", network, bin, vdeHint)
		}
	}
	return nil
}

// joinNetwork makes sure the network's switch and slirpvde are running and
// every VM on it has its lease, so a VM started now can plug into it.
// Idempotent: running daemons are kept.
func (d *Driver) joinNetwork(ctx context.Context, name string) error {
	n, err := d.l.network(name)
	if err != nil {
		return err
	}
	if err := requireVDE(name); err != nil {
		return err
	}
	unlock, err := d.lockNetworks()
	if err != nil {
		return err
	}
	defer unlock()
	return d.ensureNetwork(ctx, n)
}

// ensureNetwork starts what of the network is not running; the caller
// holds the network lock. A switch that died is started again on the same
// sockets and the running VMs are plugged into it again (see replug); a
// slirpvde that died is started again with the leases it had.
func (d *Driver) ensureNetwork(ctx context.Context, n network) error {
	fresh := false
	if _, err := os.Stat(n.dir); errors.Is(err, fs.ErrNotExist) {
		if err := makePrivateDir(n.dir, os.Mkdir); err != nil {
			return fmt.Errorf("network %q directory: %w", n.name, err)
		}
		fresh = true
	}
	switchDied := false
	if _, ok := n.switchPid(); !ok {
		// A slirpvde plugged into a dead switch goes with it.
		for _, pid := range daemonsOn("slirpvde", n.sock) {
			stopDaemon(ctx, pid)
		}
		for _, pid := range daemonsOn("vde_switch", n.sock) {
			stopDaemon(ctx, pid) // one whose start outlived our wait: it would hold the old ports
		}
		// A killed switch leaves its sockets and its pidfile, which it
		// would refuse to write over.
		os.RemoveAll(n.sock)
		os.Remove(n.switchPidfile())
		os.Remove(n.switchConsole())
		d.log.Info("starting network switch", "network", n.name, "sock", n.sock)
		// -f /dev/null: no rc file (~/.vderc) changes the switch.
		if err := startDaemon(ctx, n.switchPid, "vde_switch", "-d", "-f", "/dev/null", "-s", n.sock, "-M", n.switchConsole(), "-p", n.switchPidfile()); err != nil {
			return fmt.Errorf("network %q: %w", n.name, err)
		}
		switchDied = !fresh
	}
	slirpStarted := false
	if _, ok := n.slirpPid(); !ok {
		// One whose start outlived startDaemon's wait (its pidfile written
		// late, or over by the next start) would be a second slirpvde on
		// the segment: a second DHCP server and gateway with the same MAC.
		for _, pid := range daemonsOn("slirpvde", n.sock) {
			stopDaemon(ctx, pid)
		}
		os.Remove(n.slirpPidfile())
		d.log.Info("starting network slirp", "network", n.name)
		if err := startDaemon(ctx, n.slirpPid, "slirpvde", "-d", "-q", "--dhcp", "-s", n.sock, "-p", n.slirpPidfile()); err != nil {
			return fmt.Errorf("network %q: %w", n.name, err)
		}
		slirpStarted = true
	}
	// Each is pending until done, so that the supervisor tries again when
	// it fails: the running VMs must not stay off a new switch because
	// pinning the leases failed (vde_plug cut off under load), nor a new
	// slirpvde stay without the leases it had.
	if switchDied {
		d.setPending(d.replugPending, n.name, true)
	}
	if slirpStarted {
		d.setPending(d.leasesPending, n.name, true)
	}
	leasesErr := d.pinLeases(ctx, n, d.isPending(d.leasesPending, n.name))
	if leasesErr == nil {
		d.setPending(d.leasesPending, n.name, false)
	}
	if d.isPending(d.replugPending, n.name) && d.replug(ctx, n) {
		d.setPending(d.replugPending, n.name, false)
	}
	if leasesErr != nil {
		return fmt.Errorf("network %q: %w", n.name, leasesErr)
	}
	return nil
}

// members lists the VMs on the network, running or not.
func (d *Driver) members(network string) []int {
	var ids []int
	for _, id := range d.vmids() {
		if c, err := readVMConfig(d.l.vmConfig(id)); err == nil && c.Network == network {
			ids = append(ids, id)
		}
	}
	return ids
}

// pinLeases has slirpvde give every member VM its lease (see
// network_dhcp.go): after replaying the recorded ones into a slirpvde
// just started, when fresh.
func (d *Driver) pinLeases(ctx context.Context, n network, fresh bool) error {
	had := readLeases(n.leasesFile())
	var macs []string
	if fresh {
		macs = replayOrder(had)
	}
	for _, id := range d.members(n.name) {
		if !slices.Contains(macs, vmMAC(id)) {
			macs = append(macs, vmMAC(id))
		}
	}
	ips, err := dhcpLeases(ctx, n.sock, macs)
	if err != nil {
		return err
	}
	now := map[netip.Addr]string{}
	for _, l := range had {
		now[l.ip] = l.mac
	}
	for i, mac := range macs {
		// Once all 16 are out, slirpvde gives a slot unrenewed for 6
		// minutes (a stopped VM's) to a newcomer: the record follows.
		// A replayed lease must come back as it was.
		if old, ok := now[ips[i]]; ok && old != mac && fresh {
			d.log.Warn("slirpvde gave a recorded address to another MAC", "network", n.name, "ip", ips[i], "mac", mac, "was", old)
		}
		maps.DeleteFunc(now, func(_ netip.Addr, m string) bool { return m == mac })
		now[ips[i]] = mac
	}
	var ls []lease
	for ip, mac := range now {
		ls = append(ls, lease{mac, ip})
	}
	return writeLeases(n.leasesFile(), ls)
}

// Stand VMs reach the switch through a hub inside QEMU: the NIC (net0) is
// on hub 0, and so is the uplink (up0), a hub port onto the vde netdev
// (vde0). QEMU's vde netdev does not reconnect, and the NIC's own netdev
// cannot be swapped while the NIC lives, but a hub port can: replug
// replaces vde0 and up0, and the guest sees no change at all.
const standNIC = "hubport,id=net0,hubid=0"

func (n network) uplinkArgs() []string {
	return []string{"-netdev", "vde,id=vde0,sock=" + optEscape(n.sock), "-netdev", "hubport,id=up0,hubid=0,netdev=vde0"}
}

// replug connects every running member VM to the network's new switch and
// answers whether all of them are; the supervisor tries again a second
// later when not (a QMP monitor busy or slow under load).
func (d *Driver) replug(ctx context.Context, n network) bool {
	ok := true
	for _, id := range d.members(n.name) {
		if !d.alive(id) {
			continue
		}
		err := d.monitorDo(ctx, id, func(c *qmp.Client) error {
			for _, nd := range []string{"vde0", "up0"} {
				// QEMU's own answer is that it is gone already.
				var qerr *qmp.Error
				if err := c.Execute(ctx, "netdev_del", map[string]string{"id": nd}, nil); err != nil && !errors.As(err, &qerr) {
					return err
				}
			}
			if err := c.Execute(ctx, "netdev_add", map[string]string{"type": "vde", "id": "vde0", "sock": n.sock}, nil); err != nil {
				return err
			}
			return c.Execute(ctx, "netdev_add", map[string]any{"type": "hubport", "id": "up0", "hubid": 0, "netdev": "vde0"}, nil)
		})
		if err != nil {
			d.log.Warn("could not plug a VM into its network's new switch", "network", n.name, "vmid", id, "err", err)
			ok = false
			continue
		}
		d.log.Info("plugged a VM into its network's new switch", "network", n.name, "vmid", id)
	}
	return ok
}

// setPending and isPending keep what is still to do for a network (the
// replugPending and leasesPending sets).
func (d *Driver) setPending(set map[string]bool, network string, pending bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if pending {
		set[network] = true
	} else {
		delete(set, network)
	}
}

func (d *Driver) isPending(set map[string]bool, network string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return set[network]
}

// superviseNetworks restarts, every second, what died of the network of a
// running VM; stop ends it.
func (d *Driver) superviseNetworks() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				d.checkNetworks(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (d *Driver) checkNetworks(ctx context.Context) {
	seen := map[string]bool{}
	for _, id := range d.vmids() {
		c, err := readVMConfig(d.l.vmConfig(id))
		if err != nil || c.Network == "" || seen[c.Network] || !d.alive(id) {
			continue
		}
		seen[c.Network] = true
		n, err := d.l.network(c.Network)
		if err != nil {
			continue
		}
		_, sw := n.switchPid()
		_, sl := n.slirpPid()
		if sw && sl {
			if d.isPending(d.replugPending, n.name) || d.isPending(d.leasesPending, n.name) {
				if err := d.repair(ctx, n); err != nil {
					d.log.Warn("a network's repair is not done yet", "network", n.name, "err", err)
				}
			}
			continue
		}
		d.log.Warn("a network daemon died: restarting it", "network", n.name, "vde_switch", sw, "slirpvde", sl)
		if err := d.repair(ctx, n); err != nil {
			d.log.Error("restarting a network", "network", n.name, "err", err)
		}
	}
}

func (d *Driver) repair(ctx context.Context, n network) error {
	unlock, err := d.lockNetworks()
	if err != nil {
		return err
	}
	defer unlock()
	return d.ensureNetwork(ctx, n)
}

// leaveNetwork stops the network's daemons when no VM is on it any more:
// called after a VM is destroyed. Stopped VMs still count as members.
func (d *Driver) leaveNetwork(ctx context.Context, name string) error {
	n, err := d.l.network(name)
	if err != nil {
		return err
	}
	unlock, err := d.lockNetworks()
	if err != nil {
		return err
	}
	defer unlock()
	if len(d.members(name)) > 0 {
		return nil
	}
	for _, program := range []string{"slirpvde", "vde_switch"} {
		for _, pid := range daemonsOn(program, n.sock) {
			stopDaemon(ctx, pid)
		}
	}
	d.log.Info("stopped network", "network", name)
	return os.RemoveAll(n.dir)
}

// startDaemon runs a self-daemonizing program and waits until alive (its
// pidfile check) passes: the daemon writes its pidfile after it forks, so
// the parent's exit does not mean the file is there yet.
func startDaemon(ctx context.Context, alive func() (int, bool), bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 2 * time.Second // the daemon closes its copy of our pipe; never hang on it
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%s did not start: %s", bin, lastLines(msg, 5))
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := alive(); ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s started but its pidfile named no live %s in 5 s", bin, bin)
		}
	}
}

// stopDaemon ends pid with SIGTERM (vde_switch removes its sockets then),
// SIGKILL after 3 s, and waits for it.
func stopDaemon(ctx context.Context, pid int) {
	syscall.Kill(pid, syscall.SIGTERM)
	if !waitGone(ctx, pid, 3*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(ctx, pid, 3*time.Second)
	}
}
