package engine

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/pve/pvetest"
)

// TestPVETasks checks tasks that outlive a call's wait, and tasks that
// fail, through vm_task_wait.
func TestPVETasks(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{})
	cfg := lab.config(t, lab.alice)
	cs := connect(t, lab.server(t, cfg))

	lab.srv.HoldTasks("qmclone") // running until released, however slow the machine
	out := lab.ok(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "slow", "wait": 0.5})
	m := vmidLine.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "\ntask still running, upid=UPID:pve1:") {
		t.Fatalf("vm_clone outliving its wait = %q", out)
	}
	vmid, upid := atoi(t, m[1]), upidOf(t, out)
	if out := lab.ok(t, cs, "vm_task_wait", map[string]any{"upid": upid, "timeout": 0.2}); !strings.HasPrefix(out, "still running after") || !strings.Contains(out, upid) {
		t.Fatalf("vm_task_wait on a running clone = %q", out)
	}
	lab.srv.ReleaseTasks("qmclone")
	if out := lab.ok(t, cs, "vm_task_wait", map[string]any{"upid": upid, "timeout": 20}); out != "done: OK" {
		t.Fatalf("vm_task_wait until the clone ends = %q", out)
	}
	if vm := lab.vmState(t, vmid); vm.Lock != "" || vm.Pool != "alice" {
		t.Fatalf("the clone after its task: %+v", vm)
	}

	lab.srv.FailNextTask("qmstart", "start failed: QEMU exited with code 1")
	lab.refuse(t, cs, "vm_start", map[string]any{"vmid": vmid}, "task failed: start failed: QEMU exited with code 1")
	if vm := lab.vmState(t, vmid); vm.Status != "stopped" {
		t.Fatalf("a failed start left the VM %s", vm.Status)
	}
	lab.srv.WarnNextTask("qmstart", 2)
	if out := lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid}); out != "ok: vmid "+m[1]+" started" {
		t.Fatalf("a start ending with WARNINGS: 2 = %q; want a success", out)
	}

	lab.srv.HoldTasks("qmsnapshot")
	lab.srv.FailNextTask("qmsnapshot", "snapshot feature is not available")
	out = lab.ok(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "s1", "wait": 0.5})
	if !strings.HasPrefix(out, "vmid "+m[1]+": task still running, upid=") {
		t.Fatalf("vm_snapshot outliving its wait = %q", out)
	}
	lab.srv.ReleaseTasks("qmsnapshot")
	lab.refuse(t, cs, "vm_task_wait", map[string]any{"upid": upidOf(t, out), "timeout": 20}, "task failed: snapshot feature is not available")

	lab.refuse(t, cs, "vm_task_wait", map[string]any{"upid": "UPID:pve1:00000001:00000001:00000001:qmstart:100:alice@pve!repro:"}, "no such task")
	lab.refuse(t, cs, "vm_task_wait", map[string]any{"upid": "not-a-upid"}, "not-a-upid")
	lab.checkNoSecrets(t, cfg)
}

// TestPVEFaults checks that PVE's failures reach the model as "error:"
// plus "hint:" answers, and that calls work again once the fault is gone.
func TestPVEFaults(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{})
	cfg := lab.config(t, lab.alice)
	cs := connect(t, lab.server(t, cfg))

	// The first VM list of this token is read from the cluster, not a cache.
	lab.srv.InjectFault(pvetest.Fault{Path: "/cluster/resources", Status: 500, Message: "cfs-lock 'file-user_cfg' error: got lock request timeout", Times: 1})
	lab.refuse(t, cs, "vm_list_my_vms", nil, "cfs-lock 'file-user_cfg' error: got lock request timeout")
	lab.ok(t, cs, "vm_list_my_vms", nil)

	vmid := lab.clone(t, cs, "faulty")
	id := strconv.Itoa(vmid)
	lab.srv.InjectFault(pvetest.Fault{Method: "POST", Path: "/status/start", Status: 596, Message: "Connection timed out", Times: 1})
	lab.refuse(t, cs, "vm_start", map[string]any{"vmid": vmid}, "596")
	lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid})

	lab.srv.InjectFault(pvetest.Fault{Path: "/qemu/" + id + "/", Status: 596, Message: "Connection refused"})
	lab.refuse(t, cs, "vm_stop", map[string]any{"vmid": vmid}, "Connection refused")
	lab.refuse(t, cs, "ui_screenshot", map[string]any{"vmid": vmid}, "Connection refused")
	lab.srv.RemoveFaults()

	// No agent answers in this lab (no qemu-ga): a running VM's agent is
	// "not running", waited for until the call's timeout.
	lab.refuse(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true", "timeout": 1}, "guest agent of vmid "+id+" does not answer")
	if out := lab.ok(t, cs, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 1}); !strings.HasPrefix(out, "not booted after") {
		t.Fatalf("vm_wait_boot without an agent = %q", out)
	}
	lab.ok(t, cs, "vm_stop", map[string]any{"vmid": vmid})
	// The agent of a stopped VM is asked once per call, never waited for.
	agent := "/nodes/" + lab.vmState(t, vmid).Node + "/qemu/" + id + "/agent/"
	before := lab.srv.Hits("", agent)
	lab.refuse(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true"}, "vmid "+id+" is not running")
	lab.refuse(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": "/etc/hostname"}, "vmid "+id+" is not running")
	lab.refuse(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": "true"}, "vmid "+id+" is not running")
	if n := lab.srv.Hits("", agent) - before; n > 3 {
		t.Errorf("refusing three calls on a stopped VM asked its agent %d times: the agent of a stopped VM was waited for", n)
	}

	// A token without VM.PowerMgmt: PVE's 403 names the privilege.
	dave := connect(t, lab.server(t, lab.config(t, lab.dave)))
	daveVM := lab.clone(t, dave, "nopower")
	lab.refuse(t, dave, "vm_start", map[string]any{"vmid": daveVM}, "Permission check failed (/vms/"+strconv.Itoa(daveVM)+", VM.PowerMgmt)")
	lab.checkNoSecrets(t, cfg)
}

// TestPVEBenchCredentials checks a pve bench whose stdio token or CA is
// wrong, or missing: every call is refused with a clear error, and no
// secret shows.
func TestPVEBenchCredentials(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{})
	const wrongSecret = "11111111-2222-3333-4444-555555555555"
	cases := []struct {
		name, token, caFile, want string
	}{
		{"wrong secret", labAliceTokenID + "=" + wrongSecret, "", "invalid token value"},
		{"unknown token", "mallory@pve!x=" + wrongSecret, "", "401"},
		{"no pool", lab.bob, "", "no pool with VM.Allocate"},
		{"no token", "", "", "bench pve needs a Proxmox API token"},
		{"foreign CA", lab.alice, pvetest.WriteForeignCA(t), "is not trusted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := lab.config(t, c.token)
			if c.caFile != "" {
				cfg.Benches[len(cfg.Benches)-1].CAFile = c.caFile
			}
			cs := connect(t, lab.server(t, cfg))
			lab.refuse(t, cs, "vm_list_my_vms", nil, c.want)
			lab.refuse(t, cs, "vm_list_templates", nil, c.want)
			lab.refuse(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "x"}, c.want)
			lab.refuse(t, cs, "vm_start", map[string]any{"vmid": labForeignPool}, c.want)
			lab.checkNoSecrets(t, cfg, wrongSecret)
		})
	}
	if ids := lab.srv.VMIDs(); len(ids) != 8 {
		t.Fatalf("refused calls changed the cluster: vmids %v", ids)
	}
}

// TestPVELaggingResourceList runs against a cluster whose resource list
// shows every change a minute late (PVE's /cluster/resources lags): the
// duplicate check and ownership must not depend on it.
func TestPVELaggingResourceList(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{ResourceLag: time.Minute})
	lab.srv.AddVM(pvetest.VM{VMID: 150, Name: "alice-repro-old", Pool: "alice"})
	// An ACL on the vmid itself keeps the lagging row of 150 visible after
	// it is destroyed (the pool's ACL goes with the VM).
	lab.srv.Grant(labAliceTokenID, pvetest.Grant{Path: "/vms/150", Privs: []string{"VM.Audit"}})
	cfg := lab.config(t, lab.alice)
	cs := connect(t, lab.server(t, cfg))

	vmid := lab.clone(t, cs, "lag")
	id := strconv.Itoa(vmid)
	if out := lab.ok(t, cs, "vm_list_my_vms", nil); out != "owner alice: 1 VMs named alice-repro-*\n150\talice-repro-old\tpve1\tstopped\n" {
		t.Fatalf("vm_list_my_vms = %q; want the lagging list (the new clone not in it yet)", out)
	}
	lab.refuse(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "lag"}, "vmid "+id)
	if n := len(lab.srv.VMIDs()); n != 10 {
		t.Fatalf("the duplicate clone made a VM: %d VMs", n)
	}

	// Ownership is read from the VM itself, not from the list.
	lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid})
	lab.ok(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "s1"})
	lab.ok(t, cs, "vm_stop", map[string]any{"vmid": vmid})
	if vm := lab.vmState(t, vmid); vm.Status != "stopped" || len(vm.Snapshots) != 1 {
		t.Fatalf("after start, snapshot, stop: %+v", vm)
	}
	lab.srv.SetResourceUnknown(vmid, true) // no RRD data: the row has no name
	lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid})
	carol := connect(t, lab.server(t, lab.config(t, lab.carol)))
	lab.refuse(t, carol, "vm_stop", map[string]any{"vmid": vmid}, "not found")

	// A destroyed VM's name is free at once, although the list still shows it.
	lab.ok(t, cs, "vm_destroy", map[string]any{"vmid": 150, "confirm": true})
	out := lab.ok(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "old"})
	if m := vmidLine.FindStringSubmatch(out); m == nil || m[2] != "alice-repro-old" || m[1] == "150" {
		t.Fatalf("vm_clone of a destroyed VM's name = %q", out)
	}
	lab.ok(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true})
	lab.checkNoSecrets(t, cfg)
}
