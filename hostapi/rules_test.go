package hostapi_test

// The rules hostapi owns (ownership, locks, wait caps, agent retries),
// tested against the in-memory backend: every backend call is recorded, so
// each test asserts what reached the backend, not only what was answered.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/backendtest"
	"github.com/poligon/poligon/hostapi"
)

const (
	ns       = "bench-a" // the lock namespace of most callers
	maxWait  = 100 * time.Millisecond
	busyWait = 200 * time.Millisecond
)

// bench is alice's world: her VMs, and VMs she must not touch.
func bench(t testing.TB) (*backendtest.Backend, *hostapi.Env, context.Context) {
	t.Helper()
	be := backendtest.New("")
	be.AddTemplate(9000, "tiny")
	// A template with a name and pool of hers is still no VM of hers.
	be.AddVM(backends.VM{VMID: 9001, Name: "alice-repro-golden", Pool: "alice", Template: true})
	be.AddVM(backends.VM{VMID: 101, Name: "alice-repro-mine", Pool: "alice", Status: "running"})
	be.AddVM(backends.VM{VMID: 102, Name: "bob-repro-theirs", Pool: "alice", Status: "running"})
	be.AddVM(backends.VM{VMID: 103, Name: "alice-repro-elsewhere", Pool: "carol", Status: "running"})
	be.AddVM(backends.VM{VMID: 104, Name: "alice-repro-nopool", Status: "running"})
	be.AddVM(backends.VM{VMID: 105, Name: "alice-repro-two", Pool: "alice", Status: "running"})
	be.AddVM(backends.VM{VMID: 106, Name: "alice-repro-off", Pool: "alice", Status: "stopped"})
	env := &hostapi.Env{Locks: hostapi.NewLocks(""), MaxWait: maxWait, BusyWait: busyWait}
	ctx, cancel := context.WithTimeout(context.Background(), backendtest.HangGuard)
	t.Cleanup(cancel)
	return be, env, ctx
}

// alice is a caller whose backend names her and her pool (a Proxmox token).
func alice(t testing.TB, ctx context.Context, env *hostapi.Env, be *backendtest.Backend) *hostapi.Caller {
	t.Helper()
	c, err := hostapi.NewCaller(ctx, env, "ignored", ns, be.WithIdentity("alice", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// plain is a caller on a backend without pools: the name alone decides.
func plain(t *testing.T, ctx context.Context, env *hostapi.Env, be backends.Backend, owner, lockNS string) *hostapi.Caller {
	t.Helper()
	c, err := hostapi.NewCaller(ctx, env, owner, lockNS, be)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// lock takes a VM the caller must get, and releases it at the test's end.
func lock(t testing.TB, ctx context.Context, c *hostapi.Caller, vmid int) (*hostapi.VM, func()) {
	t.Helper()
	v, release, err := c.LockVM(ctx, vmid)
	if err != nil {
		t.Fatalf("LockVM(%d): %v", vmid, err)
	}
	t.Cleanup(release)
	return v, release
}

// arrival waits for the next call at gate; ended answers true when the
// call under test returned instead (nil: it cannot).
func arrival(t *testing.T, gate *backendtest.Gate, ended func() bool) backendtest.Call {
	t.Helper()
	deadline := time.After(backendtest.HangGuard)
	for {
		select {
		case c := <-gate.Arrived():
			return c
		case <-deadline:
			t.Fatalf("no call at the gate within %s", backendtest.HangGuard)
		case <-time.After(10 * time.Millisecond):
			if ended != nil && ended() {
				t.Fatal("the call returned before it reached the gate")
			}
		}
	}
}

// methods renders calls as "Method vmid", dropping arguments that vary
// (a pid).
func methods(calls []string) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		f := strings.Fields(c)
		out[i] = strings.Join(f[:min(2, len(f))], " ")
	}
	return out
}

func TestOwnership(t *testing.T) {
	be, env, ctx := bench(t)
	c := alice(t, ctx, env, be)
	if c.Owner() != "alice" || !slices.Equal(c.Pools(), []string{"alice"}) {
		t.Fatalf("the backend's identity did not stand: %q %v", c.Owner(), c.Pools())
	}
	for _, tc := range []struct {
		vmid int
		want string
	}{
		{102, `vmid 102 is not yours: its name "bob-repro-theirs" does not start with alice-repro-`},
		{9001, "vmid 9001 is not yours: it is a template: clone it with vm_clone"},
		{103, `vmid 103 is not yours: it is in pool "carol", not one of yours (alice)`},
		{104, "vmid 104 is not yours: it is in none of your pools (alice)"},
		{4242, "vmid 4242 not found"},
	} {
		be.ResetCalls()
		_, _, err := c.LockVM(ctx, tc.vmid)
		if err == nil || err.Error() != tc.want || !strings.Contains(hostapi.HintOf(err), "vm_list_my_vms") {
			t.Errorf("LockVM(%d) = %v (hint %q), want %q", tc.vmid, err, hostapi.HintOf(err), tc.want)
		}
		// A refusal reads the VM and does nothing else.
		if got := be.Calls(); !slices.Equal(got, []string{fmt.Sprintf("VM %d", tc.vmid)}) {
			t.Errorf("LockVM(%d) sent %q", tc.vmid, got)
		}
	}
	if _, _, err := c.LockVM(ctx, 4242); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("an unknown vmid does not wrap ErrNotFound: %v", err)
	}
	v, _ := lock(t, ctx, c, 101)
	if v.ID() != 101 || v.Info().Name != "alice-repro-mine" {
		t.Fatalf("mine: %v", v)
	}

	// A refused lock is not kept: bob (no pools) takes his VM at once.
	bob := plain(t, ctx, env, be, "bob", ns)
	lock(t, ctx, bob, 102)

	mine, err := c.MyVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids := vmids(mine); !slices.Equal(ids, []int{101, 105, 106}) {
		t.Errorf("MyVMs of alice with pool alice = %v", ids)
	}
	nopools := plain(t, ctx, env, be, "alice", ns)
	if _, _, err := nopools.LockVM(ctx, 9001); err == nil || !strings.Contains(err.Error(), "it is a template") {
		t.Errorf("a template of alice's name, without pools: %v", err)
	}
	mine, _ = nopools.MyVMs(ctx)
	if ids := vmids(mine); !slices.Equal(ids, []int{101, 103, 104, 105, 106}) {
		t.Errorf("MyVMs of alice without pools = %v", ids)
	}
}

func vmids(vms []backends.VM) []int {
	var out []int
	for _, vm := range vms {
		out = append(out, vm.VMID)
	}
	return out
}

func TestCloneRules(t *testing.T) {
	be, env, ctx := bench(t)
	c := alice(t, ctx, env, be)
	for _, tc := range []struct {
		template   int
		name, pool string
		want       string
	}{
		{9000, "elsewhere", "", "a VM named alice-repro-elsewhere exists (vmid 103) but is not yours"},
		{9000, "new", "carol", `pool "carol" is not one of yours`},
		{4242, "new", "", "template 4242 not found"},
		{101, "new", "", "template 101 not found"}, // a VM is no template
	} {
		if _, err := c.Clone(ctx, tc.template, tc.name, false, tc.pool, 0); err == nil || err.Error() != tc.want {
			t.Errorf("Clone(%d, %q, pool %q) = %v, want %q", tc.template, tc.name, tc.pool, err, tc.want)
		}
	}
	res, err := c.Clone(ctx, 9000, "mine", false, "", 0)
	if err != nil || !res.Existed || res.VMID != 101 {
		t.Errorf("Clone of a name of mine = %+v, %v; want the existing VM", res, err)
	}
	if n := be.Count("Clone"); n != 0 {
		t.Fatalf("refused clones reached the backend %d times", n)
	}
	res, err = c.Clone(ctx, 9000, "repro-new", true, "", 0)
	if err != nil || res.Existed || res.Name != "alice-repro-new" {
		t.Fatalf("Clone = %+v, %v", res, err)
	}
	// The caller's only pool is where it goes.
	if got := be.CallsOf("Clone"); len(got) != 1 || got[0].String() != "Clone 9000 alice-repro-new full pool=alice" {
		t.Fatalf("the backend saw %v", got)
	}
}

func TestLockRules(t *testing.T) {
	be, env, ctx := bench(t)
	c := alice(t, ctx, env, be)
	other := alice(t, ctx, env, be) // another call of the same caller

	// Uncontended, LockVM reads the VM once (on Proxmox each read is three
	// requests).
	be.ResetCalls()
	_, release := lock(t, ctx, c, 101)
	if got := be.Calls(); !slices.Equal(got, []string{"VM 101"}) {
		t.Errorf("an uncontended LockVM sent %q, want one read", got)
	}

	start := time.Now()
	_, _, err := other.LockVM(ctx, 101)
	if err == nil || err.Error() != "vmid 101 is busy" || !strings.Contains(hostapi.HintOf(err), "wait for the other call") {
		t.Fatalf("a held VM: %v (hint %q)", err, hostapi.HintOf(err))
	}
	if waited := time.Since(start); waited < busyWait {
		t.Errorf("refused as busy after %s, before the busy wait (%s)", waited, busyWait)
	}
	// A caller with a wait of its own (a browser's input) is refused after
	// it.
	start = time.Now()
	_, _, err = alice(t, ctx, env, be).WithBusyWait(0).LockVM(ctx, 101)
	if err == nil || err.Error() != "vmid 101 is busy" || time.Since(start) >= busyWait {
		t.Fatalf("a held VM, without waiting: %v after %s", err, time.Since(start))
	}
	lock(t, ctx, other, 105) // another vmid is free meanwhile
	// The same vmid in another lock namespace (another cluster) is another VM.
	lock(t, ctx, plain(t, ctx, env, be, "alice", "bench-b"), 101)
	release()
	lock(t, ctx, other, 101)
}

func TestLockWaiters(t *testing.T) {
	be, env, ctx := bench(t)
	env.BusyWait = backendtest.HangGuard // here the waiter must get in
	c, other := alice(t, ctx, env, be), alice(t, ctx, env, be)

	// A waiter gets the VM once the holder releases it, and reads it again
	// after the wait.
	_, release := lock(t, ctx, c, 101)
	be.ResetCalls()
	got := make(chan error, 1)
	go func() {
		_, r, err := other.LockVM(ctx, 101)
		if err == nil {
			r()
		}
		got <- err
	}()
	backendtest.WaitParked(t, "hostapi.(*Locks).Acquire", func() bool { return len(got) > 0 })
	release()
	if err := <-got; err != nil {
		t.Fatalf("the waiter after the release: %v", err)
	}
	if got := be.Calls(); !slices.Equal(got, []string{"VM 101", "VM 101"}) {
		t.Errorf("a contended LockVM sent %q, want a read before and after the wait", got)
	}

	// While a waiter waits, the VM may be destroyed and its vmid reused:
	// ownership is checked again once the lock is taken.
	_, release = lock(t, ctx, c, 105)
	go func() {
		_, r, err := other.LockVM(ctx, 105)
		if err == nil {
			r()
		}
		got <- err
	}()
	backendtest.WaitParked(t, "hostapi.(*Locks).Acquire", func() bool { return len(got) > 0 })
	be.UpdateVM(105, func(vm *backends.VM) { vm.Name = "bob-repro-reused" })
	release()
	if err := <-got; err == nil || !strings.HasPrefix(err.Error(), "vmid 105 is not yours") {
		t.Fatalf("a vmid reused while the call waited: %v", err)
	}
	lock(t, ctx, plain(t, ctx, env, be, "bob", ns), 105) // and the refused lock was let go

	// A waiter whose call is cancelled stops waiting and says so.
	_, release = lock(t, ctx, c, 101)
	defer release()
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _, err := other.LockVM(cctx, 101)
		got <- err
	}()
	backendtest.WaitParked(t, "hostapi.(*Locks).Acquire", func() bool { return len(got) > 0 })
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled while waiting for vmid 101") {
		t.Fatalf("a cancelled waiter: %v", err)
	}
}

// TestWaitCaps: a tool call's wait is capped at MaxWait (the client drops
// a call at about a minute); a script run's is not. The backend sees the
// cap as its context's deadline.
func TestWaitCaps(t *testing.T) {
	be, env, ctx := bench(t)
	be.HoldTasks("qmstart") // the start never ends until the test says
	tool := alice(t, ctx, env, be)
	v, _ := lock(t, ctx, tool, 106)
	res, err := v.Start(ctx, 600*time.Second)
	if err != nil || res.Done || res.UPID == "" {
		t.Fatalf("a start that outlives its wait = %+v, %v", res, err)
	}
	res, err = tool.WaitTask(ctx, res.UPID, 600*time.Second)
	if err != nil || res.Done {
		t.Fatalf("WaitTask of a task still running = %+v, %v", res, err)
	}
	waits := be.CallsOf("WaitTask")
	if len(waits) != 2 {
		t.Fatalf("WaitTask calls: %v", waits)
	}
	for _, w := range waits {
		if d, ok := w.Timeout(); !ok || d > maxWait {
			t.Errorf("a tool call's task wait reached the backend with %v (deadline %v), want at most MaxWait %s", d, ok, maxWait)
		}
	}

	// A script's wait is its own: the backend waits until the task ends.
	script := alice(t, ctx, env, be).ForScript()
	gate := be.Gate("WaitTask")
	done := make(chan hostapi.TaskResult, 1)
	go func() {
		res, err := script.WaitTask(ctx, res.UPID, 600*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	arrived := arrival(t, gate, nil)
	if d, ok := arrived.Timeout(); !ok || d <= maxWait || d > 600*time.Second {
		t.Errorf("a script's task wait of 600 s reached the backend with %v (deadline %v)", d, ok)
	}
	if err := be.FinishTask(res.UPID, "OK"); err != nil {
		t.Fatal(err)
	}
	gate.Open()
	if res := <-done; !res.Done || res.Failed {
		t.Fatalf("the script's wait after the task ended = %+v", res)
	}

	// WaitBoot the same way: an agent that does not answer is waited for
	// at most MaxWait in a tool call.
	be.SetAgent(101, false)
	v, _ = lock(t, ctx, tool, 101)
	be.ResetCalls()
	booted, _, err := v.WaitBoot(ctx, 600*time.Second)
	if err != nil || booted {
		t.Fatalf("WaitBoot without an agent = %v, %v", booted, err)
	}
	pings := be.CallsOf("GuestPing")
	if len(pings) == 0 {
		t.Fatal("WaitBoot did not ask the agent")
	}
	for _, p := range pings {
		if d, ok := p.Timeout(); !ok || d > maxWait {
			t.Errorf("a tool call's ping reached the backend with %v (deadline %v), want at most MaxWait %s", d, ok, maxWait)
		}
	}
	gate = be.Gate("GuestPing")
	boot := make(chan bool, 1)
	go func() {
		sv, release, err := script.LockVM(ctx, 105)
		if err != nil {
			t.Error(err)
			boot <- false
			return
		}
		defer release()
		be.SetAgent(105, false)
		booted, _, err := sv.WaitBoot(ctx, 600*time.Second)
		if err != nil {
			t.Error(err)
		}
		boot <- booted
	}()
	// The first ping is held until its own deadline (3 s) ends it: a wait
	// capped at MaxWait would give up there, the script's pings again.
	ended := func() bool { return len(boot) > 0 }
	arrival(t, gate, ended)
	if c := arrival(t, gate, ended); c.String() != "GuestPing 105" {
		t.Fatalf("arrived %s", c)
	}
	be.SetAgent(105, true)
	gate.Open()
	if !<-boot {
		t.Fatal("the script's WaitBoot did not see the agent come up")
	}
}

// TestAgentRetries: calls safe to repeat (ping, exec status, file read) are
// retried while the agent does not answer; a state-changing call (exec
// start, file write) is sent once; a stopped VM's agent is not waited for.
func TestAgentRetries(t *testing.T) {
	be, env, ctx := bench(t)
	c := alice(t, ctx, env, be)
	v, _ := lock(t, ctx, c, 101)
	be.SetExec(func(int, backends.ExecRequest) backends.ExecStatus {
		return backends.ExecStatus{Exited: true, Stdout: []byte("hi\n")}
	})
	notAnswering := fmt.Errorf("vmid 101: %w", backends.ErrAgentNotRunning)

	be.ResetCalls()
	be.Fail("GuestPing", 2, notAnswering)
	be.Fail("ExecStatus", 2, notAnswering)
	res, err := v.Exec(ctx, "echo hi", 0)
	if err != nil || string(res.Stdout) != "hi\n" {
		t.Fatalf("Exec through an agent that answers on the third try = %+v, %v", res, err)
	}
	want := []string{"GuestPing 101", "GuestPing 101", "GuestPing 101", "ExecStart 101", "ExecStatus 101", "ExecStatus 101", "ExecStatus 101"}
	if got := methods(be.Calls()); !slices.Equal(got, want) {
		t.Fatalf("Exec sent\n%q\nwant\n%q", got, want)
	}
	if req := be.CallsOf("ExecStart")[0].Detail.(backends.ExecRequest); req.Path != "/bin/sh" || !strings.HasSuffix(req.Args[len(req.Args)-1], "echo hi") {
		t.Fatalf("the command went out as %+v", req)
	}

	be.ResetCalls()
	be.Fail("ExecStart", 1, notAnswering)
	if _, err := v.Exec(ctx, "echo hi", 0); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("Exec whose start went unanswered = %v", err)
	}
	if n := be.Count("ExecStart"); n != 1 {
		t.Fatalf("an unanswered exec start was sent %d times: the command may run twice", n)
	}

	be.ResetCalls()
	be.Fail("WriteFile", 1, notAnswering)
	if err := v.WriteFile(ctx, "/tmp/f", []byte("data")); err == nil {
		t.Fatal("WriteFile whose write went unanswered succeeded")
	}
	if n := be.Count("WriteFile"); n != 1 {
		t.Fatalf("an unanswered file write was sent %d times", n)
	}

	if err := v.WriteFile(ctx, "/tmp/f", []byte("data")); err != nil {
		t.Fatal(err)
	}
	be.ResetCalls()
	be.Fail("ReadFile", 2, notAnswering)
	data, size, err := v.ReadFile(ctx, "/tmp/f", 0, 0)
	if err != nil || string(data) != "data" || size != 4 {
		t.Fatalf("ReadFile through an agent that answers on the third try = %q, %d, %v", data, size, err)
	}
	if n := be.Count("ReadFile"); n != 3 {
		t.Fatalf("ReadFile sent %d times, want 3 (retried while the agent did not answer)", n)
	}

	// A stopped VM: asked once, refused at once. PVE says both "not
	// running" and "agent not running" for it.
	off, _ := lock(t, ctx, c, 106)
	be.ResetCalls()
	if _, err := off.Exec(ctx, "true", 0); err == nil || err.Error() != "vmid 106 is not running" {
		t.Fatalf("Exec on a stopped VM = %v", err)
	}
	be.Fail("ReadFile", -1, fmt.Errorf("vmid 101: %w (%w)", backends.ErrNotRunning, backends.ErrAgentNotRunning))
	if _, _, err := v.ReadFile(ctx, "/tmp/f", 0, 0); err == nil || err.Error() != "vmid 101 is not running" {
		t.Fatalf("ReadFile when the backend says the VM stopped = %v", err)
	}
	if got := methods(be.Calls()); !slices.Equal(got, []string{"GuestPing 106", "ReadFile 101"}) {
		t.Fatalf("calls on a stopped VM: %q, want each sent once", got)
	}
}

// TestScreenWaitCaps: the screen waits obey the one wait cap too. On a
// screen that never changes, a tool call's WaitChange, WaitStill and
// WaitWindow asked for 10 minutes end at MaxWait; a script's WaitChange
// waits the whole second it asked for.
func TestScreenWaitCaps(t *testing.T) {
	be, env, ctx := bench(t)
	be.SetExec(func(int, backends.ExecRequest) backends.ExecStatus {
		return backends.ExecStatus{Exited: true, Stdout: []byte("pm apt-get\n")} // windows.sh: no window
	})
	tool := alice(t, ctx, env, be)
	v, release := lock(t, ctx, tool, 101)
	for name, wait := range map[string]func() (time.Duration, error){
		"WaitChange": func() (time.Duration, error) { s, err := v.WaitChange(ctx, 10*time.Minute); return s.Elapsed, err },
		"WaitStill": func() (time.Duration, error) {
			s, err := v.WaitStill(ctx, 10*time.Minute, 10*time.Minute)
			return s.Elapsed, err
		},
		"WaitWindow": func() (time.Duration, error) {
			w, err := v.WaitWindow(ctx, "Firefox", false, "test", 10*time.Minute)
			return w.Elapsed, err
		},
	} {
		// Only the cap ends these before their 10 minutes (and the test's
		// own guard before that).
		if took, err := wait(); err != nil || took > backendtest.HangGuard/2 {
			t.Errorf("a tool call's %s of 10 minutes took %v, %v", name, took, err)
		}
	}
	release()
	script := alice(t, ctx, env, be).ForScript()
	sv, _ := lock(t, ctx, script, 101)
	if s, err := sv.WaitChange(ctx, time.Second); err != nil || s.OK || s.Elapsed < time.Second {
		t.Errorf("a script's WaitChange of 1 s on a still screen = %+v after %v, %v", s.OK, s.Elapsed, err)
	}
}
