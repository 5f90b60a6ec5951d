package app

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/bmc"
	"github.com/poligon/poligon/backends/pikvm"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/hostapi"
)

// Controller is a physical bench's client (backends/pikvm, backends/bmc):
// some of Console, Power and VirtualMedia, and a Close() error when it
// holds connections.
type Controller interface {
	backends.Backend
}

// openPhysical connects to a pikvm or bmc bench's controller; its lines
// (downloads, failures, a BMC session left open) go to log.
func openPhysical(bc config.Bench, log *slog.Logger) (Bench, error) {
	var ctl Controller
	var err error
	switch bc.Type {
	case "pikvm":
		ctl, err = pikvm.New(pikvm.Config{URL: bc.API, User: bc.User, Password: bc.Password.Reveal(), TOTPSecret: bc.TOTP.Reveal(),
			CAFile: bc.CAFile, PinSHA256: bc.PinSHA256, Logger: log})
	case "bmc":
		var b *bmc.Bench
		b, err = bmc.New(bmc.Config{Name: bc.Name, URL: bc.API, User: bc.User, Password: bc.Password.Reveal(), Dialect: bc.Dialect,
			CAFile: bc.CAFile, PinSHA256: bc.PinSHA256, Log: log})
		if err == nil {
			ctl = b.Backend() // Console only where the dialect has one
		}
	default:
		err = fmt.Errorf("bench %s: type %q is no physical machine", bc.Name, bc.Type)
	}
	if err != nil {
		return nil, err
	}
	return Physical(bc, ctl), nil
}

// Physical makes the bench bc is from its controller's client: the
// machine as vmid 1, with bc's policy for leases and gates.
func Physical(bc config.Bench, ctl Controller) Bench { return &physical{bc: bc, ctl: ctl} }

// physical is a bench that is one machine behind a controller. It serves
// the machine as vmid 1 (hostapi.MachineVMID) with the controller's
// capabilities, and its policy (hostapi.Physical) for hostapi's leases and
// gates.
type physical struct {
	bc  config.Bench
	ctl Controller
}

var (
	_ backends.Lifecycle    = (*physical)(nil)
	_ backends.Console      = (*physical)(nil)
	_ backends.Power        = (*physical)(nil)
	_ backends.VirtualMedia = (*physical)(nil)
	_ hostapi.Physical      = (*physical)(nil)
)

func (p *physical) Kind() string { return p.bc.Type + " " + p.bc.Name }

// Machine is the operator's policy for the bench.
func (p *physical) Machine() hostapi.Machine {
	allow := map[string]bool{}
	for _, a := range p.bc.Allow {
		allow[a] = true
	}
	return hostapi.Machine{Bench: p.bc.Name, Type: p.bc.Type, Rental: p.bc.Rental, Allow: allow, DryRun: p.bc.DryRun, Approval: p.bc.Approval}
}

// Open serves a caller with a verified owner and, where the bench has a
// key, the key (X-Bench-Key over HTTP; a trusted transport needs none).
func (p *physical) Open(ctx context.Context, who hostapi.Credentials) (backends.Backend, string, error) {
	ns := "bench:" + p.bc.Name
	key := p.bc.Key.Reveal()
	keyed := key != "" && who.BenchKey != "" && subtle.ConstantTimeCompare([]byte(key), []byte(who.BenchKey.Reveal())) == 1
	switch {
	case who.Remote && key != "" && !keyed:
		return nil, "", hostapi.Failf("send the bench's key in X-Bench-Key", "bench %s needs its key", p.bc.Name)
	case who.Owner == "" && keyed:
		return keyPrincipal{p}, ns, nil // the key is the caller
	case who.Owner == "":
		return nil, "", hostapi.Failf("send Authorization: Bearer <token> with a token the server's config maps to an owner",
			"bench %s needs a bearer token: a Proxmox token does not name an owner here", p.bc.Name)
	}
	return p, ns, nil
}

// keyPrincipal is a physical bench opened with its key alone: everyone
// holding the key is one caller, named after the bench (the manual's
// warning: a shared key is not multi-tenant access).
type keyPrincipal struct{ *physical }

func (k keyPrincipal) Identity(ctx context.Context) (string, []string, error) {
	return hostapi.KeyPrincipal(k.bc.Name), nil, nil
}

func (p *physical) Problems() []string { return nil }
func (p *physical) Consoles() int      { return 0 }
func (p *physical) Facts() map[string]string {
	return map[string]string{"type": p.bc.Type, "rental": fmt.Sprint(p.bc.Rental)}
}
func (p *physical) Close() {
	if c, ok := p.ctl.(interface{ Close() error }); ok {
		c.Close()
	}
}

func (p *physical) noLifecycle(what string) error {
	return backends.WithHint(fmt.Errorf("bench %s is a physical machine: it cannot %s", p.bc.Name, what),
		"use bench_power to power it, bench_media for installer media; the machine is vmid 1")
}

func (p *physical) Templates(ctx context.Context) ([]backends.Template, error) { return nil, nil }

func (p *physical) VMs(ctx context.Context) ([]backends.VM, error) {
	vm, err := p.VM(ctx, hostapi.MachineVMID)
	if err != nil {
		return nil, err
	}
	return []backends.VM{vm}, nil
}

// VM answers the machine. Its status is not asked of the controller: every
// tool call reads the VM, and on a BMC each question is a Redfish login;
// bench_status and bench_power status ask for the power state.
func (p *physical) VM(ctx context.Context, vmid int) (backends.VM, error) {
	if vmid != hostapi.MachineVMID {
		return backends.VM{}, fmt.Errorf("bench %s has only vmid %d: %w", p.bc.Name, hostapi.MachineVMID, backends.ErrNotFound)
	}
	return backends.VM{VMID: hostapi.MachineVMID, Name: p.bc.Name, Node: p.bc.Type, Status: "unknown"}, nil
}

func (p *physical) Clone(ctx context.Context, req backends.CloneRequest) (int, backends.Task, error) {
	return 0, backends.Task{}, p.noLifecycle("be cloned")
}
func (p *physical) Start(ctx context.Context, vmid int) (backends.Task, error) {
	return backends.Task{}, p.noLifecycle("be started with vm_start")
}
func (p *physical) Stop(ctx context.Context, vmid int) (backends.Task, error) {
	return backends.Task{}, p.noLifecycle("be stopped with vm_stop")
}
func (p *physical) Destroy(ctx context.Context, vmid int) (backends.Task, error) {
	return backends.Task{}, p.noLifecycle("be destroyed")
}

func (p *physical) Console(ctx context.Context, vmid int) (backends.Screen, error) {
	c, err := backends.As[backends.Console](p.ctl, "console")
	if err != nil {
		return nil, err
	}
	return c.Console(ctx, vmid)
}

func (p *physical) PowerState(ctx context.Context) (string, error) {
	pw, err := backends.As[backends.Power](p.ctl, "power")
	if err != nil {
		return "", err
	}
	return pw.PowerState(ctx)
}

func (p *physical) Power(ctx context.Context, action string) error {
	pw, err := backends.As[backends.Power](p.ctl, "power")
	if err != nil {
		return err
	}
	return pw.Power(ctx, action)
}

func (p *physical) MediaList(ctx context.Context) ([]backends.MediaImage, backends.MediaState, error) {
	m, err := backends.As[backends.VirtualMedia](p.ctl, "virtual media")
	if err != nil {
		return nil, backends.MediaState{}, err
	}
	return m.MediaList(ctx)
}

func (p *physical) MediaMount(ctx context.Context, mount backends.MediaMount) error {
	m, err := backends.As[backends.VirtualMedia](p.ctl, "virtual media")
	if err != nil {
		return err
	}
	return m.MediaMount(ctx, mount)
}

func (p *physical) MediaEject(ctx context.Context) error {
	m, err := backends.As[backends.VirtualMedia](p.ctl, "virtual media")
	if err != nil {
		return err
	}
	return m.MediaEject(ctx)
}
