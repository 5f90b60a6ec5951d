package pve

import (
	"errors"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
)

// Cache lifetimes.
const (
	identityTTL = 60 * time.Second
	vmListTTL   = 10 * time.Second // the VM list and the members of the token's pools
	// createdTTL is how long after its task ended a VM this token created
	// is still known to be its own by that record alone: long enough for
	// /cluster/resources to catch up. While the task runs (minutes for a
	// full clone) the record stays, up to createdMaxAge.
	createdTTL    = 5 * time.Minute
	createdMaxAge = 24 * time.Hour
	maxCreated    = 1024
	taskMemoTTL   = time.Hour
	consoleIdle   = 15 * time.Minute // an unused console is closed after this
	maxTaskMemos  = 4096
	// refusedTTL is how long a token PVE answered 401 is not sent again:
	// PVE makes every 401 wait 3 s, so a client retrying a wrong secret
	// would otherwise pay that on each call.
	refusedTTL = 30 * time.Second
	tokenIdle  = time.Hour // a token unused this long, with no console, is forgotten
	// Token states are made before their token is verified, so a flood of
	// bogus tokens would hold memory for tokenIdle. Above maxTokens a new
	// token also evicts those unused for crowdedIdle.
	maxTokens   = 1024
	crowdedIdle = time.Minute
)

// Cluster is the state every Backend of one bench shares: what carries no
// credential (which node a VM is on, and a generation number that every
// mutation bumps so that every token's cached lists are re-read), and one
// tokenState per token. Make one per bench with NewCluster and pass it in
// Config.Cluster; it serves one endpoint (URL or BackendID), fixed by the
// first Backend made with it.
type Cluster struct {
	mu       sync.Mutex
	endpoint string
	gen      uint64
	nodes    map[int]string
	tokens   map[string]*tokenState
}

// NewCluster makes the shared state of one bench.
func NewCluster() *Cluster {
	return &Cluster{nodes: map[int]string{}, tokens: map[string]*tokenState{}}
}

// bind fixes the endpoint the Cluster serves: caches of two clusters must
// never mix.
func (cl *Cluster) bind(endpoint string) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch cl.endpoint {
	case "":
		cl.endpoint = endpoint
	case endpoint:
	default:
		return errors.New("pve: Config.Cluster serves " + cl.endpoint + ", not " + endpoint + ": make one Cluster per bench")
	}
	return nil
}

// tokenState is what one token on one endpoint has learned: what the token
// may see is only ever served to the same token, and nothing one token
// does (a refusal, a forgotten VM) changes another's.
type tokenState struct {
	cl      *Cluster
	lastUse time.Time // guarded by cl.mu

	mu       sync.Mutex
	ident    *identityAnswer
	identAt  time.Time
	rows     []resourceRow
	rowsGen  uint64
	rowsAt   time.Time
	members  map[string]poolMembers // by pool
	created  map[int]*createdVM     // by vmid
	consoles map[int]*console
	opening  map[int]chan struct{} // consoles being opened
	memos    map[string]taskMemo
	refused  *refusal
}

// poolMembers is the answer of GET /pools?poolid=P for one pool: the VMs in
// it (nil when the token may not read them, or asking failed).
type poolMembers struct {
	vmids map[int]bool
	gen   uint64
	at    time.Time
	ttl   time.Duration
}

// createdVM is a VM this token created (clone or create) into a pool. PVE
// adds a new VM to its pool only when the task ends, and without
// Pool.Audit no list shows the pool at all: this record is how the VM is
// known to be the token's meanwhile, by vmid and by name.
type createdVM struct {
	vmid       int
	name, node string
	pool       string
	upid       string
	at         time.Time
	ended      time.Time // when its task was seen to end well; zero before
}

// valid says whether the record still speaks for the VM.
func (c *createdVM) valid(now time.Time) bool {
	if c.ended.IsZero() {
		return now.Sub(c.at) < createdMaxAge
	}
	return now.Sub(c.ended) < createdTTL
}

func (c *createdVM) vm() backends.VM {
	return backends.VM{VMID: c.vmid, Name: c.name, Node: c.node, Status: "stopped", Pool: c.pool}
}

// refusal is a 401 PVE answered for this token.
type refusal struct {
	at  time.Time
	err error
}

// taskMemo remembers, for a task we started, the VM it is about (a clone's
// UPID names the template) or, for a task that had nothing to do, its
// final status.
type taskMemo struct {
	vmid int
	noop *backends.TaskStatus
	at   time.Time
}

func (cl *Cluster) token(key string) *tokenState {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	now := time.Now()
	s, ok := cl.tokens[key]
	if !ok {
		idle := tokenIdle
		if len(cl.tokens) >= maxTokens {
			idle = crowdedIdle
		}
		cl.pruneLocked(now, idle)
		s = &tokenState{cl: cl, consoles: map[int]*console{}, memos: map[string]taskMemo{},
			members: map[string]poolMembers{}, created: map[int]*createdVM{}}
		cl.tokens[key] = s
	}
	s.lastUse = now
	return s
}

// pruneLocked forgets the tokens unused for idle that hold no console, so
// that every distinct token a client ever sent (a typo, a revoked one, a
// flood of bogus ones) does not stay in memory for the life of the process.
// A token whose lock is held is in use: TryLock skips it, so cl.mu is
// never held while waiting for a token.
func (cl *Cluster) pruneLocked(now time.Time, idle time.Duration) {
	for key, s := range cl.tokens {
		if now.Sub(s.lastUse) < idle || !s.mu.TryLock() { // busy: keep it for now
			continue
		}
		unused := len(s.consoles) == 0 && len(s.opening) == 0
		s.mu.Unlock()
		if unused {
			delete(cl.tokens, key)
		}
	}
}

// invalidate marks every token's cached lists of this cluster stale.
func (cl *Cluster) invalidate() {
	cl.mu.Lock()
	cl.gen++
	cl.mu.Unlock()
}

func (cl *Cluster) generation() uint64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.gen
}

func (cl *Cluster) learnNode(vmid int, node string) {
	cl.mu.Lock()
	cl.nodes[vmid] = node
	cl.mu.Unlock()
}

func (cl *Cluster) nodeOf(vmid int) (string, bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n, ok := cl.nodes[vmid]
	return n, ok
}

// forgetNode drops a node hint that PVE proved wrong (no config of that
// vmid on that node): a fact about the cluster, not about a token.
func (cl *Cluster) forgetNode(vmid int, node string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.nodes[vmid] == node {
		delete(cl.nodes, vmid)
	}
}

// allTokens answers every token state (to close consoles of a destroyed VM
// whoever opened them).
func (cl *Cluster) allTokens() []*tokenState {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	out := make([]*tokenState, 0, len(cl.tokens))
	for _, s := range cl.tokens {
		out = append(out, s)
	}
	return out
}

func (s *tokenState) memo(upid string, m taskMemo) {
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

func (s *tokenState) memoFor(upid string) (taskMemo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.memos[upid]
	return m, ok
}

// remember records a VM this token created, so that it is the token's (by
// vmid and by name) before any list shows it so.
func (s *tokenState) remember(c createdVM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if len(s.created) >= maxCreated {
		for id, old := range s.created {
			if !old.valid(now) {
				delete(s.created, id)
			}
		}
	}
	if len(s.created) < maxCreated {
		c.at = now
		s.created[c.vmid] = &c
	}
}

// createdRecord answers the valid record of vmid, a copy.
func (s *tokenState) createdRecord(vmid int) (createdVM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.created[vmid]
	if !ok {
		return createdVM{}, false
	}
	if !c.valid(time.Now()) {
		delete(s.created, vmid)
		return createdVM{}, false
	}
	return *c, true
}

// createdNamed answers the valid record of a VM named name.
func (s *tokenState) createdNamed(name string) (createdVM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for id, c := range s.created {
		if !c.valid(now) {
			delete(s.created, id)
			continue
		}
		if c.name == name {
			return *c, true
		}
	}
	return createdVM{}, false
}

// createdIDs answers the vmids of every valid record.
func (s *tokenState) createdIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var ids []int
	for id, c := range s.created {
		if c.valid(now) {
			ids = append(ids, id)
		}
	}
	return ids
}

// taskSeen updates the record of the VM a task of ours creates: a task
// that ended well starts the record's last createdTTL; a failed one took
// its VM with it.
func (s *tokenState) taskSeen(upid string, st backends.TaskStatus) {
	if st.Running {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.created {
		if c.upid != upid {
			continue
		}
		if st.Failed() {
			delete(s.created, id)
		} else if c.ended.IsZero() {
			c.ended = time.Now()
		}
	}
}

// forgetCreated drops this token's record of vmid (destroyed, or gone).
func (s *tokenState) forgetCreated(vmid int) {
	s.mu.Lock()
	delete(s.created, vmid)
	s.mu.Unlock()
}
