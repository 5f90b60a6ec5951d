// Package qemu is the local backend: it drives QEMU on the machine poligon
// runs on. It is the embedded default (no cluster needed) and the backend the
// console and guest agent code is tested against for real.
//
// A template is a disk image or a kernel + initrd pair described by a TOML
// file; a clone is a qcow2 overlay (linked) or a copy (full). Each running VM
// is a daemonized QEMU process with QMP, qemu-ga (virtio-serial) and VNC on
// unix sockets, found again by its pidfile when poligon restarts. KVM is used
// when a probe guest runs under it (accel.go), TCG otherwise.
package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/backends/rfb"
	"github.com/poligon/poligon/backends/tasklist"
)

// Node is the node name every local VM reports.
const Node = "local"

var (
	_ backends.Lifecycle    = (*Driver)(nil)
	_ backends.Tasks        = (*Driver)(nil)
	_ backends.Snapshots    = (*Driver)(nil)
	_ backends.Media        = (*Driver)(nil)
	_ backends.Guest        = (*Driver)(nil)
	_ backends.Console      = (*Driver)(nil)
	_ backends.Screendumper = (*Driver)(nil)
)

// Options configure a Driver. Only DataDir is required.
type Options struct {
	DataDir string // templates/, isos/, vms/
	RunDir  string // sockets and pidfiles; default <DataDir>/run, or a short temp dir
	QEMU    string // default qemu-system-x86_64
	QEMUImg string // default qemu-img
	// StopGrace is how long Stop waits for an ACPI shutdown before it pulls
	// the plug. Default 30 s.
	StopGrace time.Duration
	// OVMFCode and OVMFVars are the UEFI firmware (Debian's ovmf package).
	OVMFCode, OVMFVars string
	// Accel is auto (""), kvm or tcg: see ResolveAccel.
	Accel  string
	Logger *slog.Logger
	// ConsoleDump receives the raw bytes the VNC server of every console
	// sends (rfb.Config.Dump); nil records nothing.
	ConsoleDump io.Writer

	probe func(qemu string) kvmProbe // tests: instead of the KVM probe
}

// Driver is the local QEMU backend. It is safe for concurrent use;
// lifecycle operations on one VM are serialized.
type Driver struct {
	opts  Options
	l     layout
	log   *slog.Logger
	tasks *tasklist.List
	accel Accel

	monitors *conns[*qmp.Client]
	agents   *conns[*qga.Client]
	states   *runStates // what the monitors last answered

	stopSupervisor func()          // see superviseNetworks
	replugPending  map[string]bool // networks with a VM not yet on its new switch; under mu
	leasesPending  map[string]bool // networks whose slirpvde may lack its leases (pinning them failed); under mu

	mu      sync.Mutex
	locks   map[int]*sync.Mutex
	screens map[int]*rfb.Client
}

// New opens (creating if needed) the data directory, finds the VMs that are
// still running from an earlier process and settles the accelerator (which
// may run the KVM probe: up to 3 s, once per process).
func New(opts Options) (*Driver, error) {
	if opts.DataDir == "" {
		return nil, errors.New("qemu backend: no data directory configured")
	}
	if opts.QEMU == "" {
		opts.QEMU = "qemu-system-x86_64"
	}
	if opts.QEMUImg == "" {
		opts.QEMUImg = "qemu-img"
	}
	if opts.StopGrace == 0 {
		opts.StopGrace = 30 * time.Second
	}
	if opts.OVMFCode == "" {
		opts.OVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	}
	if opts.OVMFVars == "" {
		opts.OVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l, err := newLayout(opts.DataDir, opts.RunDir)
	if err != nil {
		return nil, fmt.Errorf("qemu backend: %w", err)
	}
	accel, err := resolveAccel(opts.QEMU, opts.Accel, opts.probe)
	if err != nil {
		return nil, fmt.Errorf("qemu backend: %w", err)
	}
	if accel.Requested == AccelAuto && accel.Mode == AccelTCG {
		opts.Logger.Info("VMs run under TCG (emulation), not KVM", "reason", accel.Reason)
	}
	d := &Driver{
		opts:    opts,
		l:       l,
		log:     opts.Logger,
		tasks:   tasklist.New(Node),
		accel:   accel,
		locks:   map[int]*sync.Mutex{},
		screens: map[int]*rfb.Client{},

		states:        newRunStates(),
		replugPending: map[string]bool{},
		leasesPending: map[string]bool{},
	}
	d.monitors = newConns(d.dialMonitor, monitorIdle)
	d.agents = newConns(d.dialAgent, agentIdle)
	d.stopSupervisor = d.superviseNetworks()
	return d, nil
}

// Kind names the backend in messages.
func (d *Driver) Kind() string { return "local" }

// DataDir answers the absolute data directory.
func (d *Driver) DataDir() string { return d.l.data }

// Accel answers "kvm" or "tcg".
func (d *Driver) Accel() string { return d.accel.Mode }

// AccelInfo answers the accelerator decision and why, for the startup log
// and /readyz.
func (d *Driver) AccelInfo() Accel { return d.accel }

// Check reports what keeps this driver from working: missing binaries,
// broken template files. An empty answer means ready.
func (d *Driver) Check() []error {
	var problems []error
	for _, bin := range []string{d.opts.QEMU, d.opts.QEMUImg} {
		if _, err := exec.LookPath(bin); err != nil {
			problems = append(problems, fmt.Errorf("%s not found: install Debian's qemu-system-x86 and qemu-utils", bin))
		}
	}
	_, tplProblems := loadTemplates(d.l.templates())
	return append(problems, tplProblems...)
}

// Close drops the driver's connections. Running VMs keep running.
func (d *Driver) Close() error {
	d.stopSupervisor()
	d.states.close()
	d.monitors.closeAll()
	d.agents.closeAll()
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, s := range d.screens {
		s.Close()
		delete(d.screens, id)
	}
	return nil
}

// lock answers the mutex that serializes lifecycle operations on vmid.
func (d *Driver) lock(vmid int) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.locks[vmid]
	if !ok {
		m = &sync.Mutex{}
		d.locks[vmid] = m
	}
	return m
}

// drop closes every connection to vmid (it stopped).
func (d *Driver) drop(vmid int) {
	d.monitors.drop(vmid)
	d.agents.drop(vmid)
	d.states.forget(vmid)
	d.dropScreen(vmid)
}

// dropScreen closes vmid's console: before the VM goes down, so the client
// does not try to reconnect to a QEMU that is quitting.
func (d *Driver) dropScreen(vmid int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.screens[vmid]; ok {
		c.Close()
		delete(d.screens, vmid)
	}
}

// TaskStatus reports on a task started by this driver.
func (d *Driver) TaskStatus(ctx context.Context, id string) (backends.TaskStatus, error) {
	return d.tasks.Status(id)
}

// WaitTask blocks until a task ends or ctx does.
func (d *Driver) WaitTask(ctx context.Context, id string) (backends.TaskStatus, error) {
	return d.tasks.Wait(ctx, id)
}
