package engine

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends/pve/pvetest"
	"github.com/poligon/poligon/engine/stand"
	"github.com/poligon/poligon/internal/store"
)

// Stands and clones on a Proxmox bench (pvetest): full clones whose copy
// takes a time that grows with the disk, as on PVE.

// hostIPv4 skips the test unless this host has a global IPv4 address:
// pvetest's guest agent is this host's qemu-ga, so a stand machine's
// address is the host's.
func hostIPv4(t *testing.T) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return
		}
	}
	t.Skip("this host has no global IPv4 address: pvetest's agent would report none")
}

// TestStandOnPVE builds a two-machine stand on a pve bench through
// stand_apply, as a user does: an app whose step reads what the db's step
// wrote and uses the db's address. Both machines are full clones, cloned
// and started at the same time (the fake lets neither clone nor either
// start go on until both have begun: a builder that did one machine after
// the other would never finish), each started only once its copy ended,
// and the app's step runs after the db is done. Then stand_destroy.
func TestStandOnPVE(t *testing.T) {
	hostIPv4(t)
	lab := newPVELab(t, pvetest.Options{Agent: true})
	cfg := lab.config(t, lab.alice)
	s := lab.server(t, cfg)
	cs := connect(t, s)
	lab.srv.GateTasks("qmclone", 2)
	lab.srv.GateTasks("qmstart", 2)

	dir := t.TempDir() // the "guests" are this host: their files are here
	plan := map[string]any{
		"name": "shop",
		"machines": []any{
			map[string]any{"role": "db", "template": "debian-13-x86-64", "steps": []any{
				map[string]any{"exec": "echo ready-{{role}}-{{stand}} > " + dir + "/db"},
			}},
			map[string]any{"role": "app", "template": "debian-13-x86-64", "steps": []any{
				map[string]any{"expect": map[string]any{"command": "cat " + dir + "/db && echo db at {{ip.db}}", "contains": "ready-db-shop"}},
			}},
		},
	}
	if out := lab.ok(t, cs, "stand_apply", map[string]any{"plan": plan}); !strings.Contains(out, `"status": "running"`) {
		t.Fatalf("stand_apply = %s", out)
	}
	v := waitStand(t, cs, "shop", stopped)
	raw, _ := json.MarshalIndent(v, "", "  ")
	if v.Status != store.StandDone {
		t.Fatalf("stand shop ended %s:\n%s", v.Status, raw)
	}
	db, app := machineOf(t, v, "db"), machineOf(t, v, "app")
	for _, m := range []stand.MachineView{db, app} {
		vm := lab.vmState(t, m.VMID)
		if vm.Name != "alice-repro-shop-"+m.Role || vm.Pool != "alice" || vm.Status != "running" || vm.Lock != "" ||
			!contains(vm.Snapshots, "clean") || strings.Contains(vm.Config["scsi0"], "base-") {
			t.Errorf("machine %s is %+v; want a running full clone in pool alice with snapshot clean", m.Role, vm)
		}
		if !m.Done || m.IP == "" {
			t.Errorf("machine %s: done %v ip %q", m.Role, m.Done, m.IP)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "db")); string(got) != "ready-db-shop\n" {
		t.Errorf("the db's step wrote %q", got)
	}
	if !app.Steps[0].Started.After(*db.Ended) {
		t.Errorf("the app's step started %v, before the db was done %v", app.Steps[0].Started, db.Ended)
	}

	// What PVE ran: two full clones copying at once, then two starts at
	// once, each after its own clone's copy.
	clones, starts := map[int]pvetest.Task{}, map[int]pvetest.Task{}
	for _, tk := range lab.srv.Tasks("qmclone") {
		clones[tk.VMID] = tk
	}
	for _, tk := range lab.srv.Tasks("qmstart") {
		starts[tk.VMID] = tk
	}
	overlap := func(a, b pvetest.Task) bool { return a.Started.Before(b.Ended) && b.Started.Before(a.Ended) }
	c1, c2, s1, s2 := clones[db.VMID], clones[app.VMID], starts[db.VMID], starts[app.VMID]
	if len(clones) != 2 || len(starts) != 2 || !overlap(c1, c2) || !overlap(s1, s2) {
		t.Fatalf("the machines were not cloned and started at once: clones %+v, starts %+v", clones, starts)
	}
	for _, m := range []stand.MachineView{db, app} {
		c, st := clones[m.VMID], starts[m.VMID]
		if c.Exit != "OK" || c.ID != "9001" || !st.Started.After(c.Ended) {
			t.Errorf("machine %s: clone %+v, start %+v; want the start after the copy", m.Role, c, st)
		}
	}
	rec, ok, err := s.app.Store.StandOf(t.Context(), s.cfg.DefaultBench, "alice", "shop")
	if err != nil || !ok {
		t.Fatalf("stand shop in the store: %v %v", ok, err)
	}
	booting := map[string]store.StandPhase{}
	for _, m := range rec.Machines {
		for _, p := range m.Phases {
			if p.Name == "booting" {
				booting[m.Role] = p
			}
		}
	}
	if b1, b2 := booting["db"], booting["app"]; !(b1.Started.Before(b2.Ended) && b2.Started.Before(b1.Ended)) {
		t.Errorf("the machines booted one after the other: db %v-%v, app %v-%v", b1.Started, b1.Ended, b2.Started, b2.Ended)
	}

	out := lab.ok(t, cs, "stand_destroy", map[string]any{"stand": "shop", "confirm": true})
	var d struct {
		OK        bool
		Destroyed []int
	}
	json.Unmarshal([]byte(out), &d)
	if !d.OK || len(d.Destroyed) != 2 {
		t.Fatalf("stand_destroy = %s", out)
	}
	for _, m := range []stand.MachineView{db, app} {
		if _, ok := lab.srv.VM(m.VMID); ok {
			t.Errorf("machine %s (vmid %d) survived stand_destroy", m.Role, m.VMID)
		}
	}
	lab.checkNoSecrets(t, cfg)
}

// TestPVECloneInProgress: while a full clone copies (at 1 MiB/s the 8 GB
// template takes hours), using the VM is refused with "still being
// cloned" and a hint naming the task to wait for, not answered as if the
// VM were stopped or missing; vm_task_wait on that task still answers.
func TestPVECloneInProgress(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{CopyRate: 1 << 20})
	cfg := lab.config(t, lab.alice)
	cs := connect(t, lab.server(t, cfg))
	out := lab.ok(t, cs, "vm_clone", map[string]any{"template_vmid": labTemplate, "name": "big", "wait": 0.5})
	m := vmidLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("vm_clone = %q", out)
	}
	vmid, upid := atoi(t, m[1]), upidOf(t, out)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"vm_start", map[string]any{}},
		{"vm_exec", map[string]any{"command": "true"}},
		{"ui_screenshot", map[string]any{}},
		{"vm_snapshot", map[string]any{"name": "s1"}},
		{"vm_destroy", map[string]any{"confirm": true}},
	} {
		c.args["vmid"] = vmid
		out := lab.refuse(t, cs, c.tool, c.args, "vmid "+strconv.Itoa(vmid)+" is still being cloned")
		if !strings.Contains(out, "\nhint: call vm_task_wait upid="+upid+";") {
			t.Errorf("%s during the clone: %q; want a hint naming its task", c.tool, out)
		}
	}
	if n := len(lab.srv.Tasks("qmstart")) + len(lab.srv.Tasks("qmsnapshot")) + len(lab.srv.Tasks("qmdestroy")); n != 0 {
		t.Errorf("%d tasks reached PVE for the VM being copied", n)
	}
	if out := lab.ok(t, cs, "vm_task_wait", map[string]any{"upid": upid, "timeout": 0.2}); !strings.HasPrefix(out, "still running after") {
		t.Fatalf("vm_task_wait on the clone = %q", out)
	}
	lab.checkNoSecrets(t, cfg)
}
