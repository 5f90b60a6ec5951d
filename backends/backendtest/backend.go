// Package backendtest is an in-memory backend for testing the layers above
// the backends (hostapi, the engine) without booting a machine. It serves
// Lifecycle, Tasks, Snapshots, Media, Guest, Console and Screendumper, and
// Identity through WithIdentity, with the semantics the real backends have
// (an unknown vmid wraps backends.ErrNotFound, VMs leaves templates out,
// starting a running VM is a finished no-op task, the agent of a stopped VM
// wraps backends.ErrNotRunning, ...).
//
// Every call is recorded in order, so a test asserts the exact sequence a
// rule produces (be.Calls() = ["VM 101", "GuestPing 101", "ExecStart 101
// /bin/sh", ...]) and the context deadline each call carried. A test steers
// the fake: VMs and templates with names, pools and status; a Gate that
// holds calls of a method until opened; Fail for an error on the next calls
// of a method; tasks held running until FinishTask; guest programs that run
// until FinishExec.
package backendtest

import (
	"context"
	"fmt"
	"image"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/tasklist"
)

// Node is the node name of every VM, template and task of the fake.
const Node = "test"

// Call is one recorded call.
type Call struct {
	Method string
	VMID   int      // 0 when the call names no VM
	Args   []string // the rest of its arguments, as text
	// Detail is the request behind the call where Args abbreviates it:
	// the backends.ExecRequest of ExecStart, the data of WriteFile, the
	// backends.CloneRequest of Clone, the backends.ISORequest of
	// CreateFromISO.
	Detail   any
	At       time.Time // when the call reached the backend
	Deadline time.Time // its context's deadline; zero when it had none
}

// String renders the call as "Method vmid args...": "VM 101", "ExecStart
// 101 /bin/sh", "WaitTask UPID:test:...", "VMs".
func (c Call) String() string {
	parts := []string{c.Method}
	if c.VMID != 0 {
		parts = append(parts, fmt.Sprint(c.VMID))
	}
	return strings.Join(append(parts, c.Args...), " ")
}

// Timeout answers how long the call's context had left when the call
// arrived, and false when it had no deadline.
func (c Call) Timeout() (time.Duration, bool) {
	if c.Deadline.IsZero() {
		return 0, false
	}
	return c.Deadline.Sub(c.At), true
}

// Backend is the fake. Make one with New; every method is safe for
// concurrent use.
type Backend struct {
	kind  string
	tasks *tasklist.List

	mu      sync.Mutex
	calls   []Call
	vms     map[int]*vm
	isos    []backends.ISO
	gates   map[string]*Gate
	faults  map[string]*fault
	hooks   map[string]func(ctx context.Context, c Call) error
	hold    map[string]bool // task types held running; "" holds every type
	held    map[string]*heldTask
	exec    func(vmid int, req backends.ExecRequest) backends.ExecStatus
	nextPID int
}

type vm struct {
	info      backends.VM
	agentDown bool
	snapshots []string
	disks     []string
	files     map[string][]byte
	procs     map[int]*backends.ExecStatus
	ifaces    []backends.Interface
	screen    *Screen
}

type fault struct {
	times int // < 0: every call
	err   error
}

type heldTask struct {
	finish chan string // receives the exit status
	effect func()
}

var (
	_ backends.Lifecycle    = (*Backend)(nil)
	_ backends.Tasks        = (*Backend)(nil)
	_ backends.Snapshots    = (*Backend)(nil)
	_ backends.Media        = (*Backend)(nil)
	_ backends.Guest        = (*Backend)(nil)
	_ backends.Console      = (*Backend)(nil)
	_ backends.Screendumper = (*Backend)(nil)
	_ backends.Identity     = (*Identified)(nil)
	_ backends.Screen       = (*Screen)(nil)
)

// New makes an empty fake whose Kind is kind ("test" when empty).
func New(kind string) *Backend {
	if kind == "" {
		kind = "test"
	}
	return &Backend{
		kind:    kind,
		tasks:   tasklist.New(Node),
		vms:     map[int]*vm{},
		gates:   map[string]*Gate{},
		faults:  map[string]*fault{},
		hooks:   map[string]func(context.Context, Call) error{},
		hold:    map[string]bool{},
		held:    map[string]*heldTask{},
		nextPID: 1000,
	}
}

// Kind answers the kind given to New.
func (b *Backend) Kind() string { return b.kind }

// AddVM adds a VM (Status "" means "stopped"; Node is always Node).
func (b *Backend) AddVM(info backends.VM) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if info.Status == "" {
		info.Status = "stopped"
	}
	info.Node = Node
	b.vms[info.VMID] = b.newVM(info)
}

// AddTemplate adds a clonable template.
func (b *Backend) AddTemplate(vmid int, name string) {
	b.AddVM(backends.VM{VMID: vmid, Name: name, Template: true})
}

// AddISO makes an installer image available to ISOs and CreateFromISO.
func (b *Backend) AddISO(volid string, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.isos = append(b.isos, backends.ISO{VolID: volid, Size: size})
}

// newVM makes a VM's state: one disk, an empty guest filesystem, a
// loopback interface and a black 720x400 text console.
func (b *Backend) newVM(info backends.VM) *vm {
	return &vm{info: info, disks: []string{"scsi0"}, files: map[string][]byte{}, procs: map[int]*backends.ExecStatus{},
		ifaces: []backends.Interface{{Name: "lo", Addresses: []net.IPNet{{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)}}}},
		screen: newScreen(b, info.VMID)}
}

// UpdateVM changes a VM in place (rename it, move it to another pool, set
// its status), as another client of the real backend might.
func (b *Backend) UpdateVM(vmid int, change func(*backends.VM)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.vms[vmid]; ok {
		change(&v.info)
		v.info.VMID, v.info.Node = vmid, Node
	}
}

// RemoveVM deletes a VM behind the callers' backs.
func (b *Backend) RemoveVM(vmid int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.vms, vmid)
}

// SetAgent makes a VM's guest agent answer (up) or not: a running VM with
// its agent down answers backends.ErrAgentNotRunning, like one still
// booting.
func (b *Backend) SetAgent(vmid int, up bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.vms[vmid]; ok {
		v.agentDown = !up
	}
}

// Info answers a VM as the fake holds it, without recording a call.
func (b *Backend) Info(vmid int) (backends.VM, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vms[vmid]
	if !ok {
		return backends.VM{}, false
	}
	return v.info, true
}

// Calls answers every call so far, rendered by Call.String, in order.
func (b *Backend) Calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, len(b.calls))
	for i, c := range b.calls {
		out[i] = c.String()
	}
	return out
}

// CallLog answers every call so far with its details, in order.
func (b *Backend) CallLog() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// CallsOf answers the calls of one method, in order.
func (b *Backend) CallsOf(method string) []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Call
	for _, c := range b.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Count answers how many calls render as call or start with call and a
// space: Count("VM 101"), Count("ExecStart").
func (b *Backend) Count(call string) int {
	n := 0
	for _, c := range b.Calls() {
		if c == call || strings.HasPrefix(c, call+" ") {
			n++
		}
	}
	return n
}

// ResetCalls forgets the calls recorded so far (after a test's setup).
func (b *Backend) ResetCalls() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = nil
}

// Fail makes the next times calls of method fail with err (times < 0:
// every call until Heal). The call is recorded, and held by a gate, first.
func (b *Backend) Fail(method string, times int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults[method] = &fault{times: times, err: err}
}

// Heal removes method's fault.
func (b *Backend) Heal(method string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.faults, method)
}

// Hook runs fn in every later call of method, after the call is recorded
// and past any gate: fn may block (within ctx), change the fake, or fail
// the call with an error. nil removes the hook.
func (b *Backend) Hook(method string, fn func(ctx context.Context, c Call) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if fn == nil {
		delete(b.hooks, method)
		return
	}
	b.hooks[method] = fn
}

// Gate holds the calls of one method until opened: a test knows a call is
// in flight (Arrived) and decides when it proceeds.
type Gate struct {
	arrived chan Call
	open    chan struct{}
	once    sync.Once
}

// Gate holds every later call of method at a new gate (replacing an older
// one for that method) until the gate is opened or the call's ctx ends.
func (b *Backend) Gate(method string) *Gate {
	g := &Gate{arrived: make(chan Call, 1024), open: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gates[method] = g
	return g
}

// Arrived receives each call that reached the gate.
func (g *Gate) Arrived() <-chan Call { return g.arrived }

// Open lets the held calls and every later one through; twice is harmless.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// enter records a call and runs what the test set up for its method: the
// gate, the hook, the fault. It answers the error the call must fail with.
func (b *Backend) enter(ctx context.Context, method string, vmid int, detail any, args ...string) error {
	c := Call{Method: method, VMID: vmid, Args: args, Detail: detail, At: time.Now()}
	c.Deadline, _ = ctx.Deadline()
	b.mu.Lock()
	b.calls = append(b.calls, c)
	g, hook := b.gates[method], b.hooks[method]
	b.mu.Unlock()
	if g != nil {
		select {
		case g.arrived <- c:
		default: // nobody reads that many arrivals: the call still waits
		}
		select {
		case <-g.open:
		case <-ctx.Done():
			return fmt.Errorf("backendtest: %s held at its gate: %w", method, ctx.Err())
		}
	}
	if hook != nil {
		if err := hook(ctx, c); err != nil {
			return err
		}
	}
	b.mu.Lock()
	f := b.faults[method]
	if f != nil {
		if f.times > 0 {
			f.times--
			if f.times == 0 {
				delete(b.faults, method)
			}
		}
		b.mu.Unlock()
		return f.err
	}
	b.mu.Unlock()
	return ctx.Err()
}

// vmLocked answers a VM or an error wrapping backends.ErrNotFound. b.mu is
// held.
func (b *Backend) vmLocked(vmid int) (*vm, error) {
	v, ok := b.vms[vmid]
	if !ok {
		return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotFound)
	}
	return v, nil
}

// Screendump answers a copy of the VM's current frame.
func (b *Backend) Screendump(ctx context.Context, vmid int) (image.Image, error) {
	if err := b.enter(ctx, "Screendump", vmid, nil); err != nil {
		return nil, err
	}
	b.mu.Lock()
	v, err := b.runningLocked(vmid)
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	img, _ := v.screen.frame()
	return img, nil
}
