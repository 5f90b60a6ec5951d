package pve

import (
	"context"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
)

// Fixture ids of the test cluster.
const (
	templateID   = 9000
	aliceTokenID = "alice@pve!repro"
)

// cluster is a test server with the usual setup: pool "alice", a template
// everybody may clone, and alice's token holding PVEVMAdmin on her pool.
type cluster struct {
	srv   *pvetest.Server
	pc    *Cluster // the bench's shared state, as one poligon process has it
	alice string   // alice's whole token
}

func newCluster(t testing.TB, opts pvetest.Options) *cluster {
	t.Helper()
	srv := pvetest.New(t, opts)
	srv.AddPool("alice")
	srv.AddTemplate(templateID, "debian-12")
	srv.AddISO("local:iso/debian-12.7.0-amd64-netinst.iso", 661651456)
	alice := srv.AddToken(aliceTokenID,
		pvetest.Grant{Path: "/pool/alice", Privs: append(append(pvetest.VMAdmin, pvetest.PoolAudit...), pvetest.DatastoreUser...)},
		pvetest.Grant{Path: "/vms/9000", Privs: pvetest.TemplateUser},
		pvetest.Grant{Path: "/storage", Privs: pvetest.DatastoreUser},
		pvetest.Grant{Path: "/sdn/zones/localnetwork", Privs: pvetest.SDNUser},
	)
	return &cluster{srv: srv, pc: NewCluster(), alice: alice}
}

// backend makes a Backend for token on the cluster, trusting its CA, with
// the cluster's shared state (as hostapi makes one per request).
func (c *cluster) backend(t testing.TB, token string, edit ...func(*Config)) *Backend {
	t.Helper()
	cfg := Config{URL: c.srv.URL, Token: token, CAFile: c.srv.CAFile, Storage: "local-lvm", Cluster: c.pc}
	for _, e := range edit {
		e(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(b.CloseConsoles)
	return b
}

func testContext(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wait waits for a task and fails the test unless it succeeded.
func wait(t testing.TB, b *Backend, task backends.Task) backends.TaskStatus {
	t.Helper()
	st, err := b.WaitTask(testContext(t, 20*time.Second), task.ID)
	if err != nil {
		t.Fatalf("WaitTask %s: %v", task.ID, err)
	}
	if st.Running || st.Failed() {
		t.Fatalf("task %s: running=%v exit=%q", task.ID, st.Running, st.ExitStatus)
	}
	return st
}

// cloneVM clones the template into alice's pool and waits for it.
func cloneVM(t testing.TB, b *Backend, name string) int {
	t.Helper()
	ctx := testContext(t, 20*time.Second)
	vmid, task, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: name, Full: true, Pool: "alice"})
	if err != nil {
		t.Fatalf("Clone %s: %v", name, err)
	}
	wait(t, b, task)
	return vmid
}

// startVM starts a VM and waits for it.
func startVM(t testing.TB, b *Backend, vmid int) {
	t.Helper()
	task, err := b.Start(testContext(t, 10*time.Second), vmid)
	if err != nil {
		t.Fatalf("Start %d: %v", vmid, err)
	}
	wait(t, b, task)
}
