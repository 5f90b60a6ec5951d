// Package hostapi is the one capability surface that built-in tools and
// scripts share. A Caller is one caller on one bench; a VM is a machine the
// caller owns, answered by Caller.LockVM with its lock held, so every call
// on a VM checks ownership and holds the VM's lock, and goes to the backend
// through the capability it needs: every rule (ownership, locks, waits,
// retries, evidence) has one implementation.
package hostapi

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/owner"
)

// Env is what every caller of the process shares. It is set up once at
// start and not changed afterwards.
type Env struct {
	Evidence string // directory screenshots may be saved under; "" refuses every path
	Locks    *Locks
	// MaxWait caps every wait a call may ask for (MCP clients drop a call at
	// about a minute). Default DefaultMaxWait.
	MaxWait time.Duration
	// BusyWait is how long a call waits for a VM another call holds before it
	// answers "vmid N is busy". Default 30 s.
	BusyWait time.Duration
	// Eyes read the screen: OCR and the vision and grounding models. Nil:
	// none (screen reading answers that it is not set up).
	Eyes *Eyes

	// Leases of physical benches; nil: none can be taken (no state_dir).
	Leases Leases

	// Dataset captures the frames tools and scripts show or aim at as
	// training material; nil: no capture.
	Dataset *Dataset

	frames frameLog   // the frames answers showed, for the stale-frame guard
	last   lastFrames // each VM's last frame taken, for the trace
}

// DefaultMaxWait is the wait cap where none is configured (the config's
// limits.max_wait default).
const DefaultMaxWait = 50 * time.Second

func (e *Env) maxWait() time.Duration {
	if e.MaxWait > 0 {
		return e.MaxWait
	}
	return DefaultMaxWait
}

func (e *Env) busyWait() time.Duration {
	if e.BusyWait > 0 {
		return e.BusyWait
	}
	return 30 * time.Second
}

// Progress receives a line of progress during long waits (MCP progress
// notifications); nil discards.
type Progress func(message string, elapsed, total time.Duration)

// Caller is one caller on one bench, for one tool call or script run: who
// they are (the owner their VMs are named after, and their pools where the
// backend has pools) and the backend that serves them.
type Caller struct {
	env      *Env
	owner    string
	pools    []string // nil when the backend has no pools
	lockNS   string   // the namespace of VM locks: the machine's identity
	bench    string   // the bench's configured name, "" where none was given
	be       backends.Backend
	progress Progress

	scriptRun bool // waits bounded by the run, not by MaxWait
	// busyWait, when set, replaces the env's wait for a VM another call
	// holds.
	busyWait *time.Duration
}

// NewCaller binds a caller to a bench. A backend that knows identities
// (a Proxmox token) decides the owner and the pools; otherwise owner (from
// the config or a bearer token) stands.
//
// lockNS names the machines the backend reaches (a data directory, a
// cluster): calls through any caller with the same namespace share VM
// locks.
func NewCaller(ctx context.Context, env *Env, owner, lockNS string, be backends.Backend) (*Caller, error) {
	c := &Caller{env: env, owner: owner, lockNS: lockNS, be: be}
	if id, ok := be.(backends.Identity); ok {
		owner, pools, err := id.Identity(ctx)
		if err != nil {
			// The backend's own message says what failed (a refused token,
			// no pool, a certificate): no generic hint to contradict it.
			return nil, err
		}
		c.owner, c.pools = owner, pools
	}
	if !ownerPattern.MatchString(c.owner) {
		return nil, Failf("set owner in the config (or run as a user whose name has letters or digits)",
			"cannot derive an owner name from %q", c.owner)
	}
	return c, nil
}

// ownerPattern is what SanitizeOwner leaves, or a bench key's principal.
var ownerPattern = regexp.MustCompile(`^([a-z0-9]+|key:[a-z][a-z0-9_-]*)$`)

// KeyPrincipal names everyone who calls bench with its key alone. The ':'
// is in no owner name (SanitizeOwner keeps [a-z0-9]), so no [[token]]
// owner can be it and share its leases.
func KeyPrincipal(bench string) string { return "key:" + bench }

// SanitizeOwner lowercases a user name and keeps only [a-z0-9]: the same
// rule the manual gives for PVE token users (Ivan.Petrov -> ivanpetrov).
func SanitizeOwner(user string) string { return owner.Sanitize(user) }

// WithProgress makes the caller's long waits report to p.
func (c *Caller) WithProgress(p Progress) *Caller { c.progress = p; return c }

// ForScript marks the caller as a script run's: its waits are not capped
// at MaxWait, since no client is waiting on each call.
func (c *Caller) ForScript() *Caller { c.scriptRun = true; return c }

// WithBusyWait makes LockVM wait at most d (0: not at all) for a VM
// another call holds, instead of busy_wait: a browser's input waits out a
// short call but never queues behind a script.
func (c *Caller) WithBusyWait(d time.Duration) *Caller { c.busyWait = &d; return c }

// WithBench names the bench the caller is on (the training dataset's
// sessions and index lines carry it).
func (c *Caller) WithBench(name string) *Caller { c.bench = name; return c }

// Owner answers the caller's owner name.
func (c *Caller) Owner() string { return c.owner }

// Pools answers the caller's pools (nil where the backend has none).
func (c *Caller) Pools() []string { return c.pools }

// Backend answers the bench's backend.
func (c *Caller) Backend() backends.Backend { return c.be }

// Prefix is what every VM name of the caller starts with.
func (c *Caller) Prefix() string { return c.owner + "-repro-" }

// VMName answers the full name for a requested one: a bare "repro-" is
// dropped, an already prefixed name is kept.
func (c *Caller) VMName(name string) string {
	if strings.HasPrefix(name, c.Prefix()) {
		return name
	}
	return c.Prefix() + strings.TrimPrefix(name, "repro-")
}

// owns reports whether vm is the caller's: its name carries the prefix and,
// where the backend has pools, it sits in one of the caller's pools.
func (c *Caller) owns(vm backends.VM) bool {
	if vm.Template || !strings.HasPrefix(vm.Name, c.Prefix()) {
		return false
	}
	return c.pools == nil || slices.Contains(c.pools, vm.Pool)
}

func (c *Caller) lifecycle() (backends.Lifecycle, error) {
	return backends.As[backends.Lifecycle](c.be, "lifecycle")
}

// notFoundHint is the hint for an unknown or foreign vmid.
const notFoundHint = "vm_list_my_vms lists your VMs; only <owner>-repro-* VMs can be touched"

// readOwned reads a VM afresh from the backend (lists may lag; ownership
// must not) and refuses it unless it is the caller's.
func (c *Caller) readOwned(ctx context.Context, vmid int) (backends.VM, error) {
	if m, ok := c.machine(); ok {
		return c.readMachine(ctx, vmid, m)
	}
	lc, err := c.lifecycle()
	if err != nil {
		return backends.VM{}, err
	}
	vm, err := lc.VM(ctx, vmid)
	if errors.Is(err, backends.ErrNotFound) {
		return backends.VM{}, &Error{Message: fmt.Sprintf("vmid %d not found", vmid), Hint: notFoundHint, Err: err}
	}
	if err != nil {
		return backends.VM{}, wrap(err, "", "vmid %d", vmid)
	}
	if !c.owns(vm) {
		why := fmt.Sprintf("its name %q does not start with %s", vm.Name, c.Prefix())
		if vm.Template {
			why = "it is a template: clone it with vm_clone"
		} else if strings.HasPrefix(vm.Name, c.Prefix()) && vm.Pool == "" {
			why = fmt.Sprintf("it is in none of your pools (%s)", strings.Join(c.pools, ", "))
		} else if strings.HasPrefix(vm.Name, c.Prefix()) {
			why = fmt.Sprintf("it is in pool %q, not one of yours (%s)", vm.Pool, strings.Join(c.pools, ", "))
		}
		return backends.VM{}, &Error{Message: fmt.Sprintf("vmid %d is not yours: %s", vmid, why), Hint: notFoundHint}
	}
	return vm, nil
}

// LockVM answers a VM the caller owns, with its lock held until release:
// the only way to act on a VM, so that every call on it holds its lock.
//
// The VM is read once. Only when another call held the lock is it read
// twice: before waiting (a foreign or unknown vmid is refused at once, not
// after the other call ends) and after (while the call waited, the VM may
// have been destroyed and its vmid given to another).
func (c *Caller) LockVM(ctx context.Context, vmid int) (*VM, func(), error) {
	release, err := c.env.Locks.Acquire(ctx, c.lockNS, vmid, 0)
	if errors.Is(err, ErrBusy) {
		if _, err := c.readOwned(ctx, vmid); err != nil {
			return nil, nil, err
		}
		wait := c.env.busyWait()
		if c.busyWait != nil {
			wait = *c.busyWait
		}
		release, err = c.env.Locks.Acquire(ctx, c.lockNS, vmid, wait)
	}
	if err != nil {
		return nil, nil, err
	}
	vm, err := c.readOwned(ctx, vmid)
	if err != nil {
		release()
		return nil, nil, err
	}
	if o := observed(ctx); o != nil {
		o.held(c, vm)
	}
	return &VM{c: c, info: vm}, release, nil
}

// clampWait is the one owner of the wait cap: 0 means do not wait; a tool
// call's wait is capped at MaxWait (MCP clients drop a call at about a
// minute), a script's is bounded by its run alone (its waits are its own:
// a login waits minutes for a greeter, reporting progress as it goes).
func (c *Caller) clampWait(d time.Duration) time.Duration {
	d = max(0, d)
	if c.scriptRun {
		return d
	}
	return min(d, c.env.maxWait())
}
