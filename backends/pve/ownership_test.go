package pve

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
)

// recommendedRole is the README's role for a poligon token on its pool
// (PVE 9 names): no Pool.Audit. engine's tests check the README says so.
var recommendedRole = append(append([]string{"VM.Allocate", "VM.Audit", "VM.Console", "VM.PowerMgmt", "VM.Snapshot"},
	append(pvetest.VMConfig, pvetest.GuestAgent...)...), "Datastore.AllocateSpace")

// roleToken adds a token as the README sets one up: exactly the
// recommended role on pool, with the disk storage in the pool (which is
// how the role's Datastore.AllocateSpace reaches it), PVETemplateUser on
// the template and PVESDNUser on the bridge.
func (c *cluster) roleToken(tokenID, pool string) string {
	c.srv.AddPoolStorage(pool, "local-lvm")
	return c.srv.AddToken(tokenID, pvetest.Grant{Path: "/pool/" + pool, Privs: recommendedRole},
		pvetest.Grant{Path: "/vms/" + strconv.Itoa(templateID), Privs: pvetest.TemplateUser},
		pvetest.Grant{Path: "/sdn/zones/localnetwork/vmbr0", Privs: pvetest.SDNUser})
}

func vmOf(vms []backends.VM, vmid int) (backends.VM, bool) {
	for _, vm := range vms {
		if vm.VMID == vmid {
			return vm, true
		}
	}
	return backends.VM{}, false
}

// Case 1 of issue 9: without Pool.Audit, /cluster/resources rows carry no
// pool; the token's own VMs still list with their pool, from its record
// of creating them and from the pool's members.
func TestOwnVMsListWithTheirPoolWithoutPoolAudit(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "PVE 8.1+", true: "PVE before 8.1"}[old], func(t *testing.T) {
			c := newCluster(t, pvetest.Options{NoPoolQuery: old})
			tok := c.roleToken("erin@pve!poligon", "alice")
			c.srv.AddPool("bob")
			c.srv.AddVM(pvetest.VM{VMID: 150, Name: "alice-repro-before", Pool: "alice"}) // made elsewhere
			c.srv.AddVM(pvetest.VM{VMID: 160, Name: "bob-repro-x", Pool: "bob"})
			c.srv.Grant("erin@pve!poligon", pvetest.Grant{Path: "/vms/160", Privs: []string{"VM.Audit"}})
			b := c.backend(t, tok)
			ctx := testContext(t, 20*time.Second)
			vmid := cloneVM(t, b, "alice-repro-mine")

			var raw []map[string]any
			if err := b.get(ctx, "list", "/cluster/resources", url.Values{"type": {"vm"}}, &raw); err != nil {
				t.Fatal(err)
			}
			for _, r := range raw {
				if r["pool"] != nil {
					t.Fatalf("a row shows a pool to a token without Pool.Audit: %v", r)
				}
			}
			vms, err := b.VMs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if vm, ok := vmOf(vms, vmid); !ok || vm.Pool != "alice" {
				t.Errorf("the token's own clone in VMs: %+v (listed %v); want pool alice", vm, ok)
			}
			if vm, _ := vmOf(vms, 160); vm.Pool != "" {
				t.Errorf("a VM in bob's pool answers pool %q; want none of the token's", vm.Pool)
			}
			// A VM of the pool the token did not create here: its pool is
			// in the pool's members, which PVE before 8.1 shows only with
			// Pool.Audit.
			want := "alice"
			if old {
				want = ""
			}
			if vm, _ := vmOf(vms, 150); vm.Pool != want {
				t.Errorf("VM 150 (in alice's pool, made elsewhere) answers pool %q; want %q", vm.Pool, want)
			}
			if vm, err := b.VM(ctx, vmid); err != nil || vm.Pool != "alice" {
				t.Errorf("VM(%d) = %+v, %v; want pool alice", vmid, vm, err)
			}
			// Another request of the same token (another Backend) knows it too.
			if vm, err := c.backend(t, tok).VM(ctx, vmid); err != nil || vm.Pool != "alice" {
				t.Errorf("VM(%d) from another Backend = %+v, %v; want pool alice", vmid, vm, err)
			}
		})
	}
}

// Case 2: a second clone of the same name is refused as existing (and the
// list answers the first in the token's pool, so hostapi calls it the
// caller's).
func TestSecondCloneOfANameWithoutPoolAudit(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.roleToken("erin@pve!poligon", "alice"))
	ctx := testContext(t, 20*time.Second)
	first := cloneVM(t, b, "alice-repro-x")
	_, _, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-x", Pool: "alice", Full: true})
	if !errors.Is(err, backends.ErrExists) || !strings.Contains(err.Error(), strconv.Itoa(first)) {
		t.Fatalf("second clone = %v; want ErrExists naming vmid %d", err, first)
	}
	vms, err := b.VMs(ctx)
	if vm, ok := vmOf(vms, first); err != nil || !ok || vm.Pool != "alice" || vm.Name != "alice-repro-x" {
		t.Errorf("VMs = %+v, %v; want vmid %d in pool alice", vms, err, first)
	}
}

// Case 3: while a full clone runs the new VM is in no pool (qemu-server
// adds it at the end) and PVE shows it to nobody but root: the token that
// clones it still knows it, through the task, and by vmid as a VM still
// being cloned (not a stopped one, nor one not found).
func TestAFullCloneInProgressIsTheClonersOwn(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	tok := c.roleToken("erin@pve!poligon", "alice")
	b := c.backend(t, tok)
	ctx := testContext(t, 20*time.Second)
	c.srv.SetTaskDuration("qmclone", time.Hour)
	vmid, task, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-slow", Pool: "alice", Full: true})
	if err != nil {
		t.Fatal(err)
	}
	next := c.backend(t, tok) // the vm_task_wait call comes in another request
	st, err := next.TaskStatus(ctx, task.ID)
	if err != nil || !st.Running || st.VMID != vmid {
		t.Fatalf("TaskStatus of the running clone = %+v, %v; want running, VMID %d", st, err, vmid)
	}
	if vm, err := next.VM(ctx, vmid); err == nil || !strings.Contains(err.Error(), "still being cloned") || !strings.Contains(backends.HintOf(err), "vm_task_wait upid="+task.ID) {
		t.Fatalf("VM(%d) during its clone = %+v, %v; want still being cloned, waiting for %s", vmid, vm, err, task.ID)
	}
	if _, _, err := next.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-slow", Pool: "alice"}); !errors.Is(err, backends.ErrExists) {
		t.Errorf("a clone of the same name during the first = %v; want ErrExists", err)
	}
	// Another token of the same pool did not create it: PVE hides it.
	carol := c.backend(t, c.srv.AddToken("carol@pve!poligon", pvetest.Grant{Path: "/pool/alice", Privs: recommendedRole}))
	if vm, err := carol.VM(ctx, vmid); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("another token's VM(%d) during the clone = %+v, %v; want ErrNotFound", vmid, vm, err)
	}
}

// Case 4: one token's refused calls change nothing another relies on:
// alice's record of the VM she created survives bob's refusals, and her
// second clone of the name is still refused.
func TestAnotherTokensRefusalKeepsMyRecords(t *testing.T) {
	c := newCluster(t, pvetest.Options{ResourceLag: time.Hour})
	c.srv.AddPool("bob")
	alice := c.backend(t, c.roleToken("alice@pve!poligon", "alice"))
	bob := c.backend(t, c.roleToken("bob@pve!poligon", "bob"))
	ctx := testContext(t, 20*time.Second)
	vmid := cloneVM(t, alice, "alice-repro-race")
	startVM(t, alice, vmid)
	for _, call := range []func() error{
		func() error { _, err := bob.VM(ctx, vmid); return err },
		func() error { _, err := bob.ExecStart(ctx, vmid, sh("true")); return err },
		func() error { _, err := bob.Stop(ctx, vmid); return err },
	} {
		if err := call(); !errors.Is(err, backends.ErrNotFound) && !errors.Is(err, ErrPermission) {
			t.Fatalf("bob's call on alice's VM = %v; want a refusal", err)
		}
	}
	if n, ok := c.pc.nodeOf(vmid); !ok || n != "pve1" {
		t.Errorf("bob's refusals dropped the shared node of vmid %d (%q, %v)", vmid, n, ok)
	}
	_, _, err := alice.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-race", Pool: "alice"})
	if !errors.Is(err, backends.ErrExists) {
		t.Fatalf("alice's second clone of the name after bob's refusals = %v; want ErrExists", err)
	}
	if vm, err := alice.VM(ctx, vmid); err != nil || vm.Pool != "alice" || vm.Status != "running" {
		t.Errorf("alice's VM after bob's refusals = %+v, %v", vm, err)
	}
}

// The list shows a new VM as soon as PVE's list does: our 10 s cache does
// not hide a VM this token just created.
func TestAFreshCloneIsListedAsSoonAsPVEListsIt(t *testing.T) {
	c := newCluster(t, pvetest.Options{ResourceLag: 300 * time.Millisecond})
	b := c.backend(t, c.roleToken("erin@pve!poligon", "alice"))
	ctx := testContext(t, 20*time.Second)
	vmid := cloneVM(t, b, "alice-repro-new")
	if vms, err := b.VMs(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := vmOf(vms, vmid); ok {
		t.Skip("PVE's list already showed the clone: nothing lagged")
	}
	for { // until PVE's own list (as this token sees it) shows it
		var raw []struct {
			VMID int `json:"vmid"`
		}
		if err := b.get(ctx, "list", "/cluster/resources", url.Values{"type": {"vm"}}, &raw); err != nil {
			t.Fatal(err)
		}
		seen := false
		for _, r := range raw {
			seen = seen || r.VMID == vmid
		}
		if seen {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("PVE never listed the clone")
		case <-time.After(50 * time.Millisecond):
		}
	}
	vms, err := b.VMs(ctx)
	if vm, ok := vmOf(vms, vmid); err != nil || !ok || vm.Pool != "alice" {
		t.Fatalf("VMs once PVE lists the clone = %+v, %v; want vmid %d in pool alice", vms, err, vmid)
	}
	// Listed: the cache serves again.
	before := c.srv.Hits("GET", "/cluster/resources")
	if _, err := b.VMs(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.srv.Hits("GET", "/cluster/resources") - before; n != 0 {
		t.Errorf("a list with every created VM in it asked PVE again (%d)", n)
	}
}

// A token PVE refused (401) is not sent again for a while: each 401 costs
// 3 s on PVE's side. The right token is not affected.
func TestARefusedTokenIsNotSentAgainAtOnce(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	ctx := testContext(t, 20*time.Second)
	wrong := c.backend(t, aliceTokenID+"=00000000-0000-0000-0000-000000000000")
	_, _, err := wrong.Identity(ctx)
	if !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("Identity with a wrong secret = %v", err)
	}
	asked := c.srv.Hits("", "")
	for _, call := range []func() error{
		func() error { _, _, err := wrong.Identity(ctx); return err },
		func() error {
			_, err := c.backend(t, aliceTokenID+"=00000000-0000-0000-0000-000000000000").VMs(ctx)
			return err
		},
	} {
		err := call()
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "not sent") ||
			!strings.Contains(err.Error(), "invalid token value") || backends.HintOf(err) != hintUnauthenticated {
			t.Errorf("a call with the refused token = %v (hint %q); want the remembered 401", err, backends.HintOf(err))
		}
	}
	if n := c.srv.Hits("", "") - asked; n != 0 {
		t.Errorf("the refused token was sent %d more times", n)
	}
	if _, _, err := c.backend(t, c.alice).Identity(ctx); err != nil {
		t.Errorf("the right token after another's refusal: %v", err)
	}
}

// Errors carry their own hints (backends.HintOf), made where they are.
func TestErrorsCarryTheirHints(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	c.srv.AddVM(pvetest.VM{VMID: 160, Name: "someone-else"})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 20*time.Second)
	vmid := cloneVM(t, b, "alice-repro-hints")
	hintOf := func(err error) string {
		t.Helper()
		if err == nil {
			t.Fatal("no error")
		}
		return backends.HintOf(err)
	}
	c.srv.Grant(aliceTokenID, pvetest.Grant{Path: "/vms/160", Privs: []string{"VM.Audit"}})
	_, err := b.Start(ctx, 160)
	if h := hintOf(err); h != hintPermission {
		t.Errorf("403: hint %q", h)
	}
	c.srv.InjectFault(pvetest.Fault{Path: "/status/current", Status: 596, Message: "Connection timed out", Times: 1})
	if _, err := b.VM(ctx, vmid); hintOf(err) != hintUnreachable {
		t.Errorf("596: %v, hint %q", err, backends.HintOf(err))
	}
	c.srv.InjectFault(pvetest.Fault{Path: "/status/current", Status: 500, Message: "got a strange answer", Times: 1})
	if _, err := b.VM(ctx, vmid); hintOf(err) != hintServer {
		t.Errorf("500: %v, hint %q", err, backends.HintOf(err))
	}
	if _, err := b.VM(ctx, 4242); !errors.Is(err, backends.ErrNotFound) || backends.HintOf(err) != "" {
		t.Errorf("not found: %v, hint %q; want none (the caller's to give)", err, backends.HintOf(err))
	}
	if _, err := b.Snapshot(ctx, vmid, "x"); err == nil {
		t.Fatal("snapshot named x succeeded") // too short a name for PVE: a 400
	} else if h := backends.HintOf(err); h != "" {
		t.Errorf("400: hint %q", h)
	}
	_, _, err = c.backend(t, c.srv.AddToken("nopool@pve!t")).Identity(ctx)
	if !errors.Is(err, ErrNoPool) || hintOf(err) != hintNoPool {
		t.Errorf("no pool: %v, hint %q", err, backends.HintOf(err))
	}
	_, err = c.backend(t, c.alice, func(cfg *Config) { cfg.CAFile = ""; cfg.Cluster = NewCluster() }).VMs(ctx)
	if hintOf(err) != hintTLS {
		t.Errorf("untrusted certificate: %v, hint %q", err, backends.HintOf(err))
	}
}
