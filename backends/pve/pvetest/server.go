// Package pvetest is a Proxmox VE API server for tests: it speaks /api2/json
// over TLS with its own CA, with PVE's envelope, error shapes (the message
// in the HTTP reason phrase and the body, parameter errors under "errors"),
// token auth, ACLs, tasks (UPIDs), a lagging /cluster/resources, and guest
// agent and VNC console endpoints backed by a real qemu-ga and a real QEMU
// VNC server running on this host. Faults (HTTP 500/596, agent down or
// busy, slow or failed tasks, dropped websockets, expired tickets, a
// foreign CA) can be injected.
//
//	srv := pvetest.New(t, pvetest.Options{Agent: true, Console: true})
//	srv.AddPool("alice")
//	srv.AddTemplate(9000, "debian-12")
//	token := srv.AddToken("alice@pve!repro",
//		pvetest.Grant{Path: "/pool/alice", Privs: pvetest.VMAdmin},
//		pvetest.Grant{Path: "/vms/9000", Privs: pvetest.TemplateUser})
//	// reach srv.URL with token, trusting srv.CAFile
//
// It models the API surface poligon uses, as documented in
// reference/protocols.md and read in pve-manager and qemu-server: a VM's
// pool in /cluster/resources only with Pool.Audit on it; GET
// /pools?poolid= members for any token (PVE >= 8.1; Options.NoPoolQuery
// for older); a clone or a created VM joining its pool only when its task
// ends, so that until then no token with rights only on the pool sees it;
// a full clone's task running for a time that grows with the disks it
// copies (Options.CopyRate), its VM locked "clone" meanwhile;
// Datastore.AllocateSpace checked on the storages new disks use (a pool's
// privileges reach the storages in it, AddPoolStorage); the agent
// endpoints allowed by PVE 8's VM.Monitor or PVE 9's VM.GuestAgent.*. It is
// not a Proxmox cluster and was not checked against one. Every running
// VM's agent is the one qemu-ga (commands run on this host as the test
// user) and every VM's screen the one QEMU's.
package pvetest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Options shape a test server. The zero value is a one-node cluster with
// quick tasks, no lag, and no agent or console processes.
type Options struct {
	// Nodes are the cluster's node names; default ["pve1"].
	Nodes []string
	// TaskDuration is how long every task runs; default 50 ms.
	TaskDuration time.Duration
	// CopyRate is how fast a full clone copies its source's disks, in bytes
	// per second: its task runs TaskDuration plus their size over the rate,
	// with the new VM locked "clone" until then, as on PVE, where a full
	// clone's copy takes minutes. Default 64 GiB/s (125 ms for the 8 GB disk
	// AddTemplate gives). A linked clone copies nothing.
	CopyRate int64
	// ResourceLag makes /cluster/resources show the cluster as it was this
	// long ago (a new VM appears, a name or status changes, only after it).
	ResourceLag time.Duration
	// AgentBootDelay is how long after a start the guest agent answers.
	AgentBootDelay time.Duration
	// TicketTTL is how long a vncproxy ticket is accepted; default 10 s.
	TicketTTL time.Duration
	// Agent starts a real qemu-ga on this host; every running VM's agent
	// endpoints forward to it. The test is skipped when qemu-ga is missing.
	Agent bool
	// Console starts one real QEMU with a VNC server on a unix socket; every
	// running VM's vncwebsocket proxies to it. The test is skipped when
	// qemu-system-x86_64 is missing.
	Console bool
	// NoPoolQuery models PVE before 8.1: GET /pools takes no poolid
	// parameter (400), so a pool's members are only at the deprecated
	// GET /pools/{poolid}, which needs Pool.Audit.
	NoPoolQuery bool
}

// Server is a running test server. Its model is changed through the
// exported helpers and inspected through VM, Hits and friends; all are safe
// to call while requests are served.
type Server struct {
	// URL is https://127.0.0.1:PORT, without /api2/json.
	URL string
	// CAFile is the PEM of the CA that signed the server's certificate.
	CAFile string
	// CAPool holds that CA.
	CAPool *x509.CertPool

	t       testing.TB
	opts    Options
	hs      *httptest.Server
	certPEM string
	routes  []route

	mu          sync.Mutex
	closed      bool
	vms         map[int]*vm
	pools       map[string]*pool
	tokens      map[string]*token
	storages    []*storage
	history     []resourceVersion
	tasks       map[string]*task
	taskPID     int
	taskDur     map[string]time.Duration
	held        map[string]bool // task types HoldTasks keeps running
	gates       map[string]*gate
	taskFaults  map[string][]taskFault
	faults      []*Fault
	hits        map[string]int
	tickets     map[string]*ticket
	expireNext  int
	agentBusy   int
	wsConns     map[*websocket.Conn]int // open console websockets -> vmid
	wsAccepted  int
	agent       *agentProc
	console     *qemuProc
	vncPassword string
}

// New starts a test server and stops it (and its qemu-ga and QEMU) in
// t.Cleanup.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if len(opts.Nodes) == 0 {
		opts.Nodes = []string{"pve1"}
	}
	if opts.TaskDuration == 0 {
		opts.TaskDuration = 50 * time.Millisecond
	}
	if opts.CopyRate <= 0 {
		opts.CopyRate = 64 << 30
	}
	if opts.TicketTTL == 0 {
		opts.TicketTTL = 10 * time.Second
	}
	s := &Server{
		t: t, opts: opts,
		vms: map[int]*vm{}, pools: map[string]*pool{}, tokens: map[string]*token{},
		tasks: map[string]*task{}, taskPID: 0x1000, taskDur: map[string]time.Duration{}, held: map[string]bool{},
		gates:      map[string]*gate{},
		taskFaults: map[string][]taskFault{}, hits: map[string]int{}, tickets: map[string]*ticket{},
		wsConns: map[*websocket.Conn]int{},
		storages: []*storage{
			{name: "local", content: "iso,vztmpl,backup", typ: "dir"},
			{name: "local-lvm", content: "images,rootdir", typ: "lvmthin"},
		},
	}
	if opts.Agent {
		s.agent = startAgent(t)
	}
	if opts.Console {
		s.console = startQEMU(t)
		s.vncPassword = s.console.password
	}
	ca, err := newAuthority("pvetest cluster CA")
	if err != nil {
		t.Fatalf("pvetest: making the CA: %v", err)
	}
	cert, certPEM, err := ca.issue()
	if err != nil {
		t.Fatalf("pvetest: issuing the server certificate: %v", err)
	}
	s.certPEM = string(certPEM)
	if s.CAFile, err = writeCA(t.TempDir(), ca); err != nil {
		t.Fatalf("pvetest: %v", err)
	}
	s.CAPool = x509.NewCertPool()
	s.CAPool.AddCert(ca.cert)
	s.routes = s.apiRoutes()

	s.hs = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	s.hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	s.hs.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what the TLS tests are about
	s.hs.StartTLS()
	s.URL = s.hs.URL
	t.Cleanup(s.close)
	return s
}

// APIURL is URL + "/api2/json".
func (s *Server) APIURL() string { return s.URL + "/api2/json" }

func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	for _, tk := range s.tasks {
		if tk.timer != nil {
			tk.timer.Stop()
		}
	}
	s.mu.Unlock()
	s.DropConsoles()
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// Nodes answers the node names.
func (s *Server) Nodes() []string { return append([]string(nil), s.opts.Nodes...) }

// Hits counts the requests so far whose method is method (any when empty)
// and whose path below /api2/json starts with pathPrefix.
func (s *Server) Hits(method, pathPrefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, c := range s.hits {
		m, p, _ := strings.Cut(k, " ")
		if (method == "" || m == method) && strings.HasPrefix(p, pathPrefix) {
			n += c
		}
	}
	return n
}

// RequestCounts answers how many requests each "METHOD path" had so far:
// take it before and after a call to see what the call asked.
func (s *Server) RequestCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.hits))
	for k, n := range s.hits {
		out[k] = n
	}
	return out
}

// Requests lists "METHOD path" of every request path seen, sorted (for
// debugging a test).
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, c := range s.hits {
		out = append(out, fmt.Sprintf("%s x%d", k, c))
	}
	sort.Strings(out)
	return out
}

func (s *Server) logf(format string, args ...any) {
	if os.Getenv("PVETEST_DEBUG") != "" {
		s.t.Logf("pvetest: "+format, args...)
	}
}
