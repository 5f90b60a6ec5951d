// Package hostapi is the one capability surface that built-in tools and
// scripts share. A Session is one caller on one bench; VM is a machine the
// caller owns. Every call checks ownership, takes the VM's lock and goes to
// the backend through the capability it needs, so every rule (ownership,
// locks, waits, evidence) has one implementation.
package hostapi

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Env is what every session of the process shares. It is set up once at
// start and not changed afterwards.
type Env struct {
	Evidence string // directory screenshots may be saved under; "" refuses every path
	Locks    *Locks
	// MaxWait caps every wait a call may ask for (MCP clients drop a call at
	// about a minute). Default 50 s.
	MaxWait time.Duration
	// BusyWait is how long a call waits for a VM another call holds before it
	// answers "vmid N is busy". Default 30 s.
	BusyWait time.Duration
}

func (e *Env) maxWait() time.Duration {
	if e.MaxWait > 0 {
		return e.MaxWait
	}
	return 50 * time.Second
}

func (e *Env) busyWait() time.Duration {
	if e.BusyWait > 0 {
		return e.BusyWait
	}
	return 30 * time.Second
}

// Caller is who makes a call. Owner is the sanitized name every VM of theirs
// starts with (<owner>-repro-...).
type Caller struct {
	Owner string
}

// Progress receives a line of progress during long waits (MCP progress
// notifications); nil discards.
type Progress func(message string, elapsed, total time.Duration)

// Session is one caller on one bench for one tool call or script run.
type Session struct {
	env      *Env
	owner    string
	pools    []string // nil when the backend has no pools
	lockNS   string   // the namespace of VM locks: the machine's identity
	be       backends.Backend
	progress Progress

	scriptRun bool // waits bounded by the run, not by MaxWait

	mu   sync.Mutex
	held map[int]bool // VM locks this session holds (a script run's VM)
}

// NewSession binds a caller to a bench. A backend that knows identities
// (a Proxmox token) decides the owner and the pools; otherwise the caller's
// configured owner stands.
//
// lockNS names the machines the backend reaches (a data directory, a
// cluster): calls through any session with the same namespace share VM
// locks.
func NewSession(ctx context.Context, env *Env, caller Caller, lockNS string, be backends.Backend) (*Session, error) {
	s := &Session{env: env, owner: caller.Owner, lockNS: lockNS, be: be, held: map[int]bool{}}
	if id, ok := be.(backends.Identity); ok {
		owner, pools, err := id.Identity(ctx)
		if err != nil {
			// The backend's own message says what failed (a refused token,
			// no pool, a certificate): no generic hint to contradict it.
			return nil, err
		}
		s.owner, s.pools = owner, pools
	}
	if !ownerPattern.MatchString(s.owner) {
		return nil, Failf("set owner in the config (or run as a user whose name has letters or digits)",
			"cannot derive an owner name from %q", s.owner)
	}
	return s, nil
}

// ownerPattern is what SanitizeOwner leaves.
var ownerPattern = regexp.MustCompile(`^[a-z0-9]+$`)

// SanitizeOwner lowercases a user name and keeps only [a-z0-9]: the same
// rule the manual gives for PVE token users (Ivan.Petrov -> ivanpetrov).
func SanitizeOwner(user string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(user) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// WithProgress makes the session report long waits to p.
func (s *Session) WithProgress(p Progress) *Session { s.progress = p; return s }

// Owner answers the caller's owner name.
func (s *Session) Owner() string { return s.owner }

// Pools answers the caller's pools (nil where the backend has none).
func (s *Session) Pools() []string { return s.pools }

// Backend answers the bench's backend.
func (s *Session) Backend() backends.Backend { return s.be }

// Prefix is what every VM name of the caller starts with.
func (s *Session) Prefix() string { return s.owner + "-repro-" }

// VMName answers the full name for a requested one: a bare "repro-" is
// dropped, an already prefixed name is kept.
func (s *Session) VMName(name string) string {
	if strings.HasPrefix(name, s.Prefix()) {
		return name
	}
	return s.Prefix() + strings.TrimPrefix(name, "repro-")
}

// owns reports whether vm is the caller's: its name carries the prefix and,
// where the backend has pools, it sits in one of the caller's pools.
func (s *Session) owns(vm backends.VM) bool {
	if vm.Template || !strings.HasPrefix(vm.Name, s.Prefix()) {
		return false
	}
	return s.pools == nil || slices.Contains(s.pools, vm.Pool)
}

func (s *Session) lifecycle() (backends.Lifecycle, error) {
	return backends.As[backends.Lifecycle](s.be, "lifecycle")
}

// notFoundHint is the hint for an unknown or foreign vmid.
const notFoundHint = "vm_list_my_vms lists your VMs; only <owner>-repro-* VMs can be touched"

// VM answers a VM the caller owns, read afresh from the backend (lists may
// lag; ownership must not).
func (s *Session) VM(ctx context.Context, vmid int) (*VM, error) {
	lc, err := s.lifecycle()
	if err != nil {
		return nil, err
	}
	vm, err := lc.VM(ctx, vmid)
	if errors.Is(err, backends.ErrNotFound) {
		return nil, &Error{Message: fmt.Sprintf("vmid %d not found", vmid), Hint: notFoundHint, Err: err}
	}
	if err != nil {
		return nil, wrap(err, "", "vmid %d", vmid)
	}
	if !s.owns(vm) {
		why := fmt.Sprintf("its name %q does not start with %s", vm.Name, s.Prefix())
		if vm.Template {
			why = "it is a template: clone it with vm_clone"
		} else if strings.HasPrefix(vm.Name, s.Prefix()) && vm.Pool == "" {
			why = fmt.Sprintf("it is in none of your pools (%s)", strings.Join(s.pools, ", "))
		} else if strings.HasPrefix(vm.Name, s.Prefix()) {
			why = fmt.Sprintf("it is in pool %q, not one of yours (%s)", vm.Pool, strings.Join(s.pools, ", "))
		}
		return nil, &Error{Message: fmt.Sprintf("vmid %d is not yours: %s", vmid, why), Hint: notFoundHint}
	}
	return &VM{s: s, info: vm}, nil
}

// Hold takes vmid's lock for the rest of the session (a script run): calls
// on that VM from this session then pass, others wait. Release with the
// answered function.
func (s *Session) Hold(ctx context.Context, vmid int) (func(), error) {
	release, err := s.env.Locks.Acquire(ctx, s.lockNS, vmid, s.env.busyWait())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.held[vmid] = true
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.held, vmid)
		s.mu.Unlock()
		release()
	}, nil
}

// lock takes vmid's lock for one call unless the session holds it already.
func (s *Session) lock(ctx context.Context, vmid int) (func(), error) {
	s.mu.Lock()
	held := s.held[vmid]
	s.mu.Unlock()
	if held {
		return func() {}, nil
	}
	return s.env.Locks.Acquire(ctx, s.lockNS, vmid, s.env.busyWait())
}

// clampWait turns a requested wait in seconds into a duration: 0 means do
// not wait; a tool call's wait is capped at MaxWait (MCP clients drop a
// call at about a minute), a script's is bounded by its run alone.
func (s *Session) clampWait(seconds float64) time.Duration {
	d := max(0, time.Duration(seconds*float64(time.Second)))
	if s.scriptRun {
		return d
	}
	return min(d, s.env.maxWait())
}

// ForScript marks the session as a script run's: its waits are not capped
// at MaxWait, since no client is waiting on each call.
func (s *Session) ForScript() *Session { s.scriptRun = true; return s }

// LockVM answers a VM the caller owns with its lock held for the rest of
// the call. Ownership is checked again once the lock is taken: while the
// call waited, the VM may have been destroyed and its vmid given to
// another.
func (s *Session) LockVM(ctx context.Context, vmid int) (*VM, func(), error) {
	if _, err := s.VM(ctx, vmid); err != nil {
		return nil, nil, err
	}
	release, err := s.Hold(ctx, vmid)
	if err != nil {
		return nil, nil, err
	}
	v, err := s.VM(ctx, vmid)
	if err != nil {
		release()
		return nil, nil, err
	}
	return v, release, nil
}
