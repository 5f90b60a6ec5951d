package pve

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
)

func TestTemplatesAndVMsWithLag(t *testing.T) {
	c := newCluster(t, pvetest.Options{ResourceLag: 300 * time.Millisecond})
	c.srv.AddVM(pvetest.VM{VMID: 9001, Name: "win11-not-for-clone", Template: true})
	c.srv.AddVM(pvetest.VM{VMID: 150, Name: "alice-repro-old", Pool: "alice", Running: true})
	c.srv.Grant(aliceTokenID, pvetest.Grant{Path: "/vms/9001", Privs: pvetest.TemplateUser})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 20*time.Second)

	tmpls, err := b.Templates(ctx)
	if err != nil || len(tmpls) != 1 || tmpls[0] != (backends.Template{VMID: templateID, Name: "debian-12", Node: "pve1"}) {
		t.Fatalf("Templates = %+v, %v; want only debian-12 (not-for-clone hidden)", tmpls, err)
	}

	vmid := cloneVM(t, b, "alice-repro-bug1")
	got, err := b.VM(ctx, vmid)
	want := backends.VM{VMID: vmid, Name: "alice-repro-bug1", Node: "pve1", Status: "stopped", Pool: "alice"}
	if err != nil || got != want {
		t.Fatalf("VM(%d) right after the clone = %+v, %v; want %+v", vmid, got, err, want)
	}
	vms, err := b.VMs(ctx)
	if err != nil || len(vms) != 1 || vms[0].VMID != 150 || vms[0].Status != "running" || vms[0].Pool != "alice" {
		t.Fatalf("VMs while the resource list lags = %+v, %v; want only vmid 150", vms, err)
	}
	// The list catches up (and our cache follows: the clone invalidated it).
	for {
		vms, err = b.VMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(vms) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the clone never appeared in VMs: %+v", vms)
		case <-time.After(100 * time.Millisecond):
			b.cl.invalidate() // skip our own 10 s cache; the lag is PVE's
		}
	}
	if vms[0] != want {
		t.Errorf("VMs row of the clone = %+v; want %+v", vms[0], want)
	}
}

func TestVMsToleratesUnknownRows(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	c.srv.AddVM(pvetest.VM{VMID: 150, Name: "alice-repro-a", Pool: "alice"})
	c.srv.SetResourceUnknown(150, true)
	vms, err := c.backend(t, c.alice).VMs(testContext(t, 10*time.Second))
	if err != nil || len(vms) != 1 || vms[0].Status != "unknown" || vms[0].Name != "" {
		t.Fatalf("VMs = %+v, %v; want one row with status unknown and no name", vms, err)
	}
}

func TestCloneRefusesADuplicateName(t *testing.T) {
	c := newCluster(t, pvetest.Options{ResourceLag: time.Hour}) // the list never shows new VMs
	b := c.backend(t, c.alice)
	ctx := testContext(t, 20*time.Second)
	first := cloneVM(t, b, "alice-repro-dup")
	// Another Backend of the same endpoint (another request) knows the name
	// although /cluster/resources does not show the clone yet.
	_, _, err := c.backend(t, c.alice).Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-dup", Pool: "alice"})
	if !errors.Is(err, backends.ErrExists) || !strings.Contains(err.Error(), strconv.Itoa(first)) {
		t.Fatalf("second clone = %v; want ErrExists naming vmid %d", err, first)
	}
	// A name the resource list shows is refused too.
	c.srv.AddVM(pvetest.VM{VMID: 170, Name: "alice-repro-listed", Pool: "alice"})
	_, _, err = b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-listed", Pool: "alice"})
	if !errors.Is(err, backends.ErrExists) || !strings.Contains(err.Error(), "170") {
		t.Fatalf("clone over a listed name = %v; want ErrExists naming 170", err)
	}
	// A clone that failed leaves its name free again.
	c.srv.FailNextTask("qmclone", "clone failed: storage full")
	vmid, task, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-retry", Pool: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := b.WaitTask(ctx, task.ID); !st.Failed() || st.VMID != vmid {
		t.Fatalf("failed clone status = %+v; want failed for vmid %d", st, vmid)
	}
	cloneVM(t, b, "alice-repro-retry")
}

func TestCloneIsLinkedUnlessFull(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 20*time.Second)
	vmid, task, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-linked", Pool: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	vm, _ := c.srv.VM(vmid)
	if !strings.Contains(vm.Config["scsi0"], "base-9000-disk-0/") || vm.Pool != "alice" {
		t.Errorf("linked clone: scsi0 %q pool %q", vm.Config["scsi0"], vm.Pool)
	}
	full := cloneVM(t, b, "alice-repro-full")
	if vm, _ := c.srv.VM(full); strings.Contains(vm.Config["scsi0"], "base-") {
		t.Errorf("full clone still refers to the template's disk: %q", vm.Config["scsi0"])
	}
}

func TestCloneIntoAPoolWithoutAllocateIsRefused(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	c.srv.AddPool("other")
	_, _, err := c.backend(t, c.alice).Clone(testContext(t, 10*time.Second),
		backends.CloneRequest{Template: templateID, Name: "alice-repro-x", Pool: "other"})
	if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "Permission check failed (/pool/other, VM.Allocate)") {
		t.Fatalf("Clone into another pool = %v; want PVE's permission error", err)
	}
}

func TestStartStopDestroy(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 30*time.Second)
	vmid := cloneVM(t, b, "alice-repro-power")

	// Stopping a stopped VM succeeds without a PVE task.
	task, err := b.Stop(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	if st := wait(t, b, task); st.Type != "qmstop" || st.VMID != vmid {
		t.Errorf("no-op stop status = %+v", st)
	}

	startVM(t, b, vmid)
	if vm, _ := b.VM(ctx, vmid); vm.Status != "running" {
		t.Fatalf("after Start: %+v", vm)
	}
	task, err = b.Start(ctx, vmid) // already running: a no-op
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)

	task, err = b.Stop(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	if st := wait(t, b, task); st.Type != "qmshutdown" {
		t.Errorf("Stop of a running VM ran %q; want qmshutdown (ACPI, then forced)", st.Type)
	}
	if vm, _ := b.VM(ctx, vmid); vm.Status != "stopped" {
		t.Fatalf("after Stop: %+v", vm)
	}

	startVM(t, b, vmid)
	task, err = b.Destroy(ctx, vmid) // running: stopped first
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	if _, err := b.VM(ctx, vmid); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("VM after Destroy = %v; want ErrNotFound", err)
	}
	if _, ok := c.srv.VM(vmid); ok {
		t.Fatal("the server still has the destroyed VM")
	}
}

func TestTaskFailureAndWarnings(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 30*time.Second)
	vmid := cloneVM(t, b, "alice-repro-tasks")

	c.srv.FailNextTask("qmstart", "start failed: QEMU exited with code 1")
	task, err := b.Start(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.WaitTask(ctx, task.ID)
	if err != nil || !st.Failed() || st.ExitStatus != "start failed: QEMU exited with code 1" || st.Type != "qmstart" || st.VMID != vmid {
		t.Fatalf("failed task = %+v, %v; want failed with PVE's exit status", st, err)
	}

	c.srv.WarnNextTask("qmstart", 2)
	task, err = b.Start(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	if st := wait(t, b, task); st.ExitStatus != "OK" {
		t.Errorf("a task with WARNINGS: exit %q; want OK", st.ExitStatus)
	}
	if exit := c.srv.TaskExit(task.ID); exit != "WARNINGS: 2" {
		t.Errorf("the server's exit status = %q", exit)
	}
}

func TestWaitTaskStopsAtTheDeadline(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	vmid := cloneVM(t, b, "alice-repro-slow")
	c.srv.SetTaskDuration("qmstart", time.Hour)
	task, err := b.Start(testContext(t, 10*time.Second), vmid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.WaitTask(testContext(t, 300*time.Millisecond), task.ID)
	if err != nil || !st.Running || st.Failed() {
		t.Fatalf("WaitTask of a slow task = %+v, %v; want still running, no error", st, err)
	}
	if _, err := b.TaskStatus(testContext(t, 5*time.Second), "UPID:nonsense"); err == nil {
		t.Error("TaskStatus accepted a malformed UPID")
	}
	unknown := strings.Replace(task.ID, ":qmstart:", ":qmstop:", 1)
	if _, err := b.WaitTask(testContext(t, 5*time.Second), unknown); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("WaitTask of an unknown task = %v; want ErrNotFound", err)
	}
}

func TestPVEErrorsKeepTheirReason(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 10*time.Second)
	c.srv.Grant(aliceTokenID, pvetest.Grant{Path: "/vms/9000", Privs: []string{"VM.PowerMgmt"}})
	_, err := b.Start(ctx, templateID)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 500 || ae.Message != "you can't start a vm if it's a template" {
		t.Fatalf("Start of a template = %v; want PVE's 500 with its message", err)
	}

	c.srv.InjectFault(pvetest.Fault{Path: "/cluster/resources", Status: 596, Message: "Connection timed out", Times: 1})
	b.cl.invalidate() // past our cache
	_, err = b.VMs(ctx)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "596") || !strings.Contains(err.Error(), "Connection timed out") {
		t.Fatalf("VMs during a 596 = %v", err)
	}
	if _, err := b.VMs(ctx); err != nil {
		t.Fatalf("VMs after the fault: %v", err)
	}

	_, err = b.VM(ctx, 4242)
	if !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("VM of an unknown vmid = %v; want ErrNotFound", err)
	}
}

func TestCloneTaskReportsTheNewVM(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 20*time.Second)
	vmid, task, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-memo", Pool: "alice", Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(task.ID, ":qmclone:9000:") {
		t.Errorf("clone UPID %q does not name the template as PVE does", task.ID)
	}
	// A fresh Backend of the same token (the next request) still maps the
	// UPID to the clone.
	st, err := c.backend(t, c.alice).WaitTask(ctx, task.ID)
	if err != nil || st.VMID != vmid || st.Type != "qmclone" {
		t.Fatalf("clone task status = %+v, %v; want VMID %d", st, err, vmid)
	}
}

// BenchmarkVMRead is one VM() read (config + status, pool from the cached
// list) against the test server.
func BenchmarkVMRead(b *testing.B) {
	c := newCluster(b, pvetest.Options{})
	c.srv.AddVM(pvetest.VM{VMID: 150, Name: "alice-repro-a", Pool: "alice"})
	be := c.backend(b, c.alice)
	ctx := testContext(b, time.Minute)
	b.ResetTimer()
	for b.Loop() {
		if _, err := be.VM(ctx, 150); err != nil {
			b.Fatal(err)
		}
	}
}

func TestVMsOnAnotherNodeAreFoundWhileTheListLags(t *testing.T) {
	c := newCluster(t, pvetest.Options{Nodes: []string{"pve1", "pve2"}, ResourceLag: time.Hour})
	c.srv.AddVM(pvetest.VM{VMID: 9100, Name: "alt-11", Node: "pve2", Template: true})
	c.srv.Grant(aliceTokenID, pvetest.Grant{Path: "/vms/9100", Privs: pvetest.TemplateUser})
	ctx := testContext(t, 30*time.Second)
	// One process clones on pve2 ...
	first := c.backend(t, c.alice, func(cfg *Config) { cfg.BackendID = "first-process"; cfg.Cluster = NewCluster() })
	vmid, task, err := first.Clone(ctx, backends.CloneRequest{Template: 9100, Name: "alice-repro-n2", Pool: "alice", Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(task.ID, "UPID:pve2:") {
		t.Errorf("clone task %q does not run on pve2", task.ID)
	}
	// ... another, which knows nothing of it and sees a list without it,
	// still finds it by asking each node.
	other := c.backend(t, c.alice)
	st, err := other.WaitTask(ctx, task.ID)
	if err != nil || st.Failed() {
		t.Fatalf("WaitTask through the other process = %+v, %v", st, err)
	}
	vm, err := other.VM(ctx, vmid)
	if err != nil || vm.Node != "pve2" || vm.Name != "alice-repro-n2" || vm.Pool != "alice" {
		t.Fatalf("VM on pve2 = %+v, %v", vm, err)
	}
	startVM(t, other, vmid)
	if got, _ := c.srv.VM(vmid); !got.Running || got.Node != "pve2" {
		t.Errorf("server state after Start: %+v", got)
	}
}

// A full clone copies for a while (at 1 MiB/s the 8 GB template takes
// hours): until its task ends the VM is neither "stopped" nor usable, and
// reading or starting it says it is still being cloned and which task to
// wait for. A linked clone is done at once.
func TestACloneInProgressSaysSo(t *testing.T) {
	c := newCluster(t, pvetest.Options{CopyRate: 1 << 20})
	b := c.backend(t, c.alice)
	ctx := testContext(t, 20*time.Second)
	vmid, task, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-big", Full: true, Pool: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	still := func(who string, err error, hint string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "vmid "+strconv.Itoa(vmid)+" is still being cloned") || !strings.Contains(backends.HintOf(err), hint) {
			t.Errorf("%s during the clone: %v (hint %q); want still being cloned, hint %q", who, err, backends.HintOf(err), hint)
		}
	}
	_, err = b.VM(ctx, vmid)
	still("VM", err, "call vm_task_wait upid="+task.ID)
	_, err = b.Start(ctx, vmid)
	still("Start", err, "call vm_task_wait upid="+task.ID)
	_, err = b.Destroy(ctx, vmid)
	still("Destroy", err, "call vm_task_wait upid="+task.ID)
	if n := len(c.srv.Tasks("qmstart")) + len(c.srv.Tasks("qmdestroy")); n != 0 {
		t.Errorf("%d start or destroy tasks reached PVE for the VM being copied", n)
	}

	// A token that did not make it but may read it sees PVE's lock.
	root := c.backend(t, c.srv.AddToken("root@pam!all", pvetest.Grant{Path: "/", Privs: append(pvetest.VMAdmin, pvetest.PoolAudit...)}))
	_, err = root.VM(ctx, vmid)
	still("another token's VM", err, fmt.Sprintf("qm unlock %d", vmid))
	_, err = root.Start(ctx, vmid)
	still("another token's Start", err, fmt.Sprintf("qm unlock %d", vmid))
	vms, err := root.VMs(ctx)
	if row, ok := vmOf(vms, vmid); err != nil || !ok || row.Status != "cloning" {
		t.Errorf("VMs row of the VM being copied = %+v (%v); want status cloning", row, err)
	}

	linked, ltask, err := b.Clone(ctx, backends.CloneRequest{Template: templateID, Name: "alice-repro-thin", Pool: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, ltask)
	if vm, err := b.VM(ctx, linked); err != nil || vm.Status != "stopped" {
		t.Errorf("the linked clone = %+v, %v; want a stopped VM", vm, err)
	}
	if st, err := b.TaskStatus(ctx, task.ID); err != nil || !st.Running {
		t.Errorf("the full clone's task once the linked one ended = %+v, %v; want running", st, err)
	}
}
