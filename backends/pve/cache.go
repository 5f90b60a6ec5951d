package pve

import (
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Cache lifetimes.
const (
	identityTTL  = 60 * time.Second
	vmListTTL    = 10 * time.Second
	recentTTL    = 5 * time.Minute // how long a VM we created is remembered by name
	taskMemoTTL  = time.Hour
	consoleIdle  = 15 * time.Minute // an unused console is closed after this
	maxTaskMemos = 4096
	sessionIdle  = time.Hour // a token unused this long, with no console, is forgotten
	// Sessions are made before their token is verified, so a flood of bogus
	// tokens would hold memory for sessionIdle. Above maxSessions a new
	// token also evicts those unused for crowdedIdle.
	maxSessions = 1024
	crowdedIdle = time.Minute
)

// endpointState is shared by every Backend of one cluster (endpoint URL or
// BackendID). What it holds carries no credential: which node a VM is on,
// the names of VMs created through this process, and a generation number
// that every mutation bumps so that every token's VM list is re-read.
type endpointState struct {
	mu       sync.Mutex
	gen      uint64
	nodes    map[int]string
	recent   map[string]recentVM
	sessions map[string]*session
}

type recentVM struct {
	vmid  int
	node  string
	until time.Time
}

// session is the state of one token on one endpoint: what the token may
// see is only ever served to the same token.
type session struct {
	ep      *endpointState
	lastUse time.Time // guarded by ep.mu

	mu       sync.Mutex
	ident    *identityAnswer
	identAt  time.Time
	rows     []resourceRow
	rowsGen  uint64
	rowsAt   time.Time
	consoles map[int]*console
	opening  map[int]chan struct{} // consoles being opened
	memos    map[string]taskMemo
}

// taskMemo remembers, for a task we started, the VM it is about (a clone's
// UPID names the template) or, for a task that had nothing to do, its
// final status.
type taskMemo struct {
	vmid int
	noop *backends.TaskStatus
	at   time.Time
}

var registry = struct {
	sync.Mutex
	endpoints map[string]*endpointState
}{endpoints: map[string]*endpointState{}}

func endpointFor(key string) *endpointState {
	registry.Lock()
	defer registry.Unlock()
	ep, ok := registry.endpoints[key]
	if !ok {
		ep = &endpointState{nodes: map[int]string{}, recent: map[string]recentVM{}, sessions: map[string]*session{}}
		registry.endpoints[key] = ep
	}
	return ep
}

func (ep *endpointState) session(key string) *session {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	now := time.Now()
	s, ok := ep.sessions[key]
	if !ok {
		idle := sessionIdle
		if len(ep.sessions) >= maxSessions {
			idle = crowdedIdle
		}
		ep.pruneLocked(now, idle)
		s = &session{ep: ep, consoles: map[int]*console{}, memos: map[string]taskMemo{}}
		ep.sessions[key] = s
	}
	s.lastUse = now
	return s
}

// pruneLocked forgets the tokens unused for idle that hold no console, so
// that every distinct token a client ever sent (a typo, a revoked one, a
// flood of bogus ones) does not stay in memory for the life of the process.
// A session whose lock is held is in use: TryLock skips it, so ep.mu is
// never held while waiting for a session.
func (ep *endpointState) pruneLocked(now time.Time, idle time.Duration) {
	for key, s := range ep.sessions {
		if now.Sub(s.lastUse) < idle || !s.mu.TryLock() { // busy: keep it for now
			continue
		}
		unused := len(s.consoles) == 0 && len(s.opening) == 0
		s.mu.Unlock()
		if unused {
			delete(ep.sessions, key)
		}
	}
}

// invalidate marks every token's VM list of this endpoint stale.
func (ep *endpointState) invalidate() {
	ep.mu.Lock()
	ep.gen++
	ep.mu.Unlock()
}

func (ep *endpointState) generation() uint64 {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.gen
}

func (ep *endpointState) learnNode(vmid int, node string) {
	ep.mu.Lock()
	ep.nodes[vmid] = node
	ep.mu.Unlock()
}

func (ep *endpointState) nodeOf(vmid int) (string, bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	n, ok := ep.nodes[vmid]
	return n, ok
}

func (ep *endpointState) forget(vmid int) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	delete(ep.nodes, vmid)
	for name, r := range ep.recent {
		if r.vmid == vmid {
			delete(ep.recent, name)
		}
	}
}

// remember notes a VM we created, so a duplicate name is refused even
// while /cluster/resources does not show it yet.
func (ep *endpointState) remember(name string, vmid int, node string) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	now := time.Now()
	for n, r := range ep.recent {
		if now.After(r.until) {
			delete(ep.recent, n)
		}
	}
	ep.recent[name] = recentVM{vmid: vmid, node: node, until: now.Add(recentTTL)}
	ep.nodes[vmid] = node
}

func (ep *endpointState) recentByName(name string) (recentVM, bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	r, ok := ep.recent[name]
	if !ok || time.Now().After(r.until) {
		return recentVM{}, false
	}
	return r, true
}

// sessions answers every session of the endpoint (to close consoles of a
// destroyed VM whoever opened them).
func (ep *endpointState) allSessions() []*session {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	out := make([]*session, 0, len(ep.sessions))
	for _, s := range ep.sessions {
		out = append(out, s)
	}
	return out
}

func (s *session) memo(upid string, m taskMemo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.at = time.Now()
	if len(s.memos) >= maxTaskMemos {
		for k, old := range s.memos {
			if time.Since(old.at) > taskMemoTTL {
				delete(s.memos, k)
			}
		}
	}
	if len(s.memos) < maxTaskMemos {
		s.memos[upid] = m
	}
}

func (s *session) memoFor(upid string) (taskMemo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.memos[upid]
	return m, ok
}
