package engine

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends/pve/pvetest"
)

// requestsDuring answers how many PVE requests fn made, and which.
func requestsDuring(srv *pvetest.Server, fn func()) (int, string) {
	before := srv.RequestCounts()
	fn()
	total := 0
	var which []string
	for k, n := range srv.RequestCounts() {
		if d := n - before[k]; d > 0 {
			total += d
			which = append(which, fmt.Sprintf("%s x%d", k, d))
		}
	}
	sort.Strings(which)
	return total, strings.Join(which, ", ")
}

// TestPVERequestsPerCall counts the PVE requests of a warm caller's
// vm_exec and vm_list_my_vms (identity cached, the VM's node known), with
// Pool.Audit and under the README's role without it, and bounds them:
//
//   - vm_exec: 2 (the VM read at the start of the call: config + status;
//     its pool from the cached list and pool members) + 1 ping + 1 exec +
//     up to 2 exec-status (the output comes after the exit) = 6;
//   - vm_list_my_vms after a mutation (which makes every cached list
//     stale): 1 /cluster/resources, plus 1 GET /pools?poolid= per pool
//     without Pool.Audit when a VM of it was not created by this process;
//     with a fresh cache: 0.
//
// At 9b35d4f the same vm_exec made 7-8 requests with Pool.Audit (hostapi
// read the VM twice) and 10 without it (the pool's members read again on
// each VM read), and vm_list_my_vms 1 (0 cached) but listed none of the
// caller's VMs without Pool.Audit.
func TestPVERequestsPerCall(t *testing.T) {
	lab := newPVELab(t, pvetest.Options{Agent: true})
	// A VM of erin's pool that this process did not create: only the
	// pool's members say it is hers.
	lab.srv.AddVM(pvetest.VM{VMID: 300, Name: "erin-repro-old", Pool: "erin"})
	for _, caller := range []struct {
		name, owner, token string
		pools              int // without Pool.Audit
		vms                int
	}{
		{"PVEVMAdmin and Pool.Audit", "alice", lab.alice, 0, 1},
		{"the README's role", "erin", lab.erin, 1, 2},
	} {
		t.Run(caller.name, func(t *testing.T) {
			cs := connect(t, lab.server(t, lab.config(t, caller.token)))
			vmid := lab.clone(t, cs, "count")
			lab.ok(t, cs, "vm_start", map[string]any{"vmid": vmid})
			lab.ok(t, cs, "vm_wait_boot", map[string]any{"vmid": vmid, "timeout": 30})
			exec := func() { lab.ok(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "true"}) }
			list := func() {
				if out := lab.ok(t, cs, "vm_list_my_vms", nil); !strings.HasPrefix(out, fmt.Sprintf("owner %s: %d VMs", caller.owner, caller.vms)) {
					t.Fatalf("vm_list_my_vms = %q", out)
				}
			}
			measure := func(what string, bound int, fn func()) {
				n, which := requestsDuring(lab.srv, fn)
				t.Logf("%s: %d PVE requests: %s", what, n, which)
				if n > bound {
					t.Errorf("%s made %d PVE requests; want at most %d", what, n, bound)
				}
			}
			exec() // warm: the agent answered once, the caches are full
			measure("vm_exec", 6, exec)
			measure("vm_exec again", 6, exec)
			lab.ok(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "s1"}) // a mutation: lists are stale
			measure("vm_list_my_vms after a mutation", 1+caller.pools, list)
			measure("vm_list_my_vms cached", 0, list)
			lab.ok(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true})
		})
	}
}
