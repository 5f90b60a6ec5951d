package backendtest

import (
	"context"
	"errors"
	"image"
	"image/color"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
)

func fixture(t *testing.T) (*Backend, context.Context) {
	t.Helper()
	b := New("")
	b.AddTemplate(9000, "tiny")
	b.AddVM(backends.VM{VMID: 101, Name: "alice-repro-a", Pool: "alice", Status: "running"})
	b.AddVM(backends.VM{VMID: 102, Name: "alice-repro-b", Pool: "alice"})
	ctx, cancel := context.WithTimeout(context.Background(), HangGuard)
	t.Cleanup(cancel)
	return b, ctx
}

func TestLifecycleLikeTheRealBackends(t *testing.T) {
	b, ctx := fixture(t)
	if _, err := b.VM(ctx, 4242); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("VM of an unknown vmid: %v", err)
	}
	if vm, err := b.VM(ctx, 9000); err != nil || !vm.Template || vm.Name != "tiny" {
		t.Fatalf("VM of a template = %+v, %v", vm, err)
	}
	vms, _ := b.VMs(ctx)
	if len(vms) != 2 || vms[0].VMID != 101 || vms[1].VMID != 102 || vms[0].Node != Node {
		t.Fatalf("VMs (templates left out) = %+v", vms)
	}
	if tpls, _ := b.Templates(ctx); len(tpls) != 1 || tpls[0].VMID != 9000 {
		t.Fatalf("Templates = %+v", tpls)
	}

	// Starting a running VM is a finished no-op; a stopped one runs after.
	task, err := b.Start(ctx, 101)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := b.WaitTask(ctx, task.ID); st.Running || st.ExitStatus != "OK" || st.Type != "qmstart" || st.VMID != 101 {
		t.Fatalf("start of a running VM: %+v", st)
	}
	task, _ = b.Start(ctx, 102)
	if st, _ := b.WaitTask(ctx, task.ID); st.Failed() {
		t.Fatalf("start: %+v", st)
	}
	if vm, _ := b.VM(ctx, 102); vm.Status != "running" {
		t.Fatalf("after start: %+v", vm)
	}
	if _, err := b.Start(ctx, 9000); err == nil {
		t.Fatal("a template started")
	}
	if _, err := b.Destroy(ctx, 9000); err == nil {
		t.Fatal("a template destroyed")
	}

	// Clone: the vmid at once, the name checked, the template too.
	id, _, err := b.Clone(ctx, backends.CloneRequest{Template: 9000, Name: "alice-repro-c", Pool: "alice"})
	if err != nil || id != 100 {
		t.Fatalf("Clone = %d, %v", id, err)
	}
	if vm, _ := b.VM(ctx, id); vm.Status != "stopped" || vm.Pool != "alice" || vm.Name != "alice-repro-c" {
		t.Fatalf("the clone: %+v", vm)
	}
	if _, _, err := b.Clone(ctx, backends.CloneRequest{Template: 9000, Name: "alice-repro-c"}); !errors.Is(err, backends.ErrExists) {
		t.Fatalf("a name taken: %v", err)
	}
	if _, _, err := b.Clone(ctx, backends.CloneRequest{Template: 101, Name: "x"}); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("a VM as template: %v", err)
	}

	// Snapshots: a name taken, an unknown one.
	task, _ = b.Snapshot(ctx, 102, "s1")
	b.WaitTask(ctx, task.ID)
	if _, err := b.Snapshot(ctx, 102, "s1"); !errors.Is(err, backends.ErrExists) {
		t.Fatalf("snapshot twice: %v", err)
	}
	if _, err := b.Rollback(ctx, 102, "nosuch"); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("rollback to nothing: %v", err)
	}
	if names, _ := b.ListSnapshots(ctx, 102); !slices.Equal(names, []string{"s1"}) {
		t.Fatalf("snapshots %v", names)
	}

	task, _ = b.Destroy(ctx, 102)
	b.WaitTask(ctx, task.ID)
	if _, err := b.VM(ctx, 102); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("after destroy: %v", err)
	}
	if _, err := b.TaskStatus(ctx, "UPID:test:0:0:0:qmstart:1:x:"); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("an unknown task: %v", err)
	}
}

func TestCallsAreRecordedInOrder(t *testing.T) {
	b, ctx := fixture(t)
	b.VM(ctx, 101)
	b.GuestPing(ctx, 101)
	pid, _ := b.ExecStart(ctx, 101, backends.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "true"}})
	b.ExecStatus(ctx, 101, pid)
	b.WriteFile(ctx, 101, "/tmp/f", []byte("hi"))
	b.ReadFile(ctx, 101, "/tmp/f", 0, 10)
	b.Clone(ctx, backends.CloneRequest{Template: 9000, Name: "alice-repro-x", Pool: "alice"})
	b.VMs(ctx)
	want := []string{"VM 101", "GuestPing 101", "ExecStart 101 /bin/sh", "ExecStatus 101 1001", "WriteFile 101 /tmp/f",
		"ReadFile 101 /tmp/f 0 10", "Clone 9000 alice-repro-x pool=alice", "VMs"}
	if got := b.Calls(); !slices.Equal(got, want) {
		t.Fatalf("calls\n%q\nwant\n%q", got, want)
	}
	if req := b.CallsOf("ExecStart")[0].Detail.(backends.ExecRequest); !slices.Equal(req.Args, []string{"-c", "true"}) {
		t.Fatalf("the exec request: %+v", req)
	}
	if n := b.Count("VM 101"); n != 1 {
		t.Fatalf("Count(VM 101) = %d", n)
	}
	if d, ok := b.CallsOf("VM")[0].Timeout(); !ok || d <= 0 || d > HangGuard {
		t.Fatalf("the deadline seen: %v %v", d, ok)
	}
	if _, ok := (Call{}).Timeout(); ok {
		t.Fatal("a call without a deadline has one")
	}
	b.ResetCalls()
	if len(b.Calls()) != 0 {
		t.Fatal("ResetCalls kept calls")
	}
}

func TestGuestLikeTheRealBackends(t *testing.T) {
	b, ctx := fixture(t)
	if err := b.GuestPing(ctx, 102); !errors.Is(err, backends.ErrNotRunning) {
		t.Fatalf("ping of a stopped VM: %v", err)
	}
	if _, err := b.ExecStart(ctx, 4242, backends.ExecRequest{Path: "/bin/true"}); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("exec on an unknown VM: %v", err)
	}
	b.SetAgent(101, false)
	if err := b.GuestPing(ctx, 101); !errors.Is(err, backends.ErrAgentNotRunning) {
		t.Fatalf("ping with the agent down: %v", err)
	}
	b.SetAgent(101, true)

	// A program that has not exited runs until FinishExec.
	b.SetExec(func(vmid int, req backends.ExecRequest) backends.ExecStatus {
		return backends.ExecStatus{Exited: req.Path != "/bin/sleep", Stdout: []byte("out")}
	})
	pid, _ := b.ExecStart(ctx, 101, backends.ExecRequest{Path: "/bin/sleep"})
	if st, _ := b.ExecStatus(ctx, 101, pid); st.Exited {
		t.Fatal("a held program exited")
	}
	b.FinishExec(101, pid, backends.ExecStatus{ExitCode: 3})
	if st, _ := b.ExecStatus(ctx, 101, pid); !st.Exited || st.ExitCode != 3 {
		t.Fatalf("after FinishExec: %+v", st)
	}
	if _, err := b.ExecStatus(ctx, 101, 99); err == nil {
		t.Fatal("status of an unknown pid")
	}

	b.WriteFile(ctx, 101, "/f", []byte("0123456789"))
	if data, size, _ := b.ReadFile(ctx, 101, "/f", 8, 100); string(data) != "89" || size != 10 {
		t.Fatalf("ReadFile window = %q, %d", data, size)
	}
	if _, _, err := b.ReadFile(ctx, 101, "/nosuch", 0, 1); err == nil || !strings.Contains(err.Error(), "No such file") {
		t.Fatalf("a missing file: %v", err)
	}
	if ifs, _ := b.Interfaces(ctx, 101); len(ifs) != 1 || ifs[0].Name != "lo" {
		t.Fatalf("interfaces %+v", ifs)
	}
}

func TestHeldTasks(t *testing.T) {
	b, ctx := fixture(t)
	b.HoldTasks("qmstart")
	task, _ := b.Start(ctx, 102)
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	st, err := b.WaitTask(short, task.ID)
	cancel()
	if err != nil || !st.Running {
		t.Fatalf("a held task after its wait: %+v, %v", st, err)
	}
	if vm, _ := b.VM(ctx, 102); vm.Status != "stopped" {
		t.Fatal("a held start took effect")
	}
	if !slices.Equal(b.HeldTasks(), []string{task.ID}) {
		t.Fatalf("held %v", b.HeldTasks())
	}
	if err := b.FinishTask(task.ID, "OK"); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.TaskStatus(ctx, task.ID); st.Running || st.ExitStatus != "OK" {
		t.Fatalf("after FinishTask: %+v", st)
	}
	if vm, _ := b.VM(ctx, 102); vm.Status != "running" {
		t.Fatal("a finished start had no effect")
	}
	// A failed task has no effect.
	b.HoldTasks()
	task, _ = b.Stop(ctx, 102)
	b.FinishTask(task.ID, "stop failed")
	if st, _ := b.TaskStatus(ctx, task.ID); !st.Failed() || st.ExitStatus != "stop failed" {
		t.Fatalf("a failed task: %+v", st)
	}
	if vm, _ := b.VM(ctx, 102); vm.Status != "running" {
		t.Fatal("a failed stop stopped the VM")
	}
	if err := b.FinishTask(task.ID, "OK"); err == nil {
		t.Fatal("a task finished twice")
	}
}

func TestGatesFaultsAndHooks(t *testing.T) {
	b, ctx := fixture(t)
	g := b.Gate("GuestPing")
	done := make(chan error, 1)
	go func() { done <- b.GuestPing(ctx, 101) }()
	if c := <-g.Arrived(); c.String() != "GuestPing 101" {
		t.Fatalf("arrived %s", c)
	}
	if len(done) != 0 {
		t.Fatal("a gated call went through")
	}
	g.Open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A gated call gives up with its ctx.
	b.Gate("VM")
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	_, err := b.VM(short, 101)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a gated call whose ctx ended: %v", err)
	}

	b.Fail("ExecStart", 2, backends.ErrAgentNotRunning)
	for i, want := range []error{backends.ErrAgentNotRunning, backends.ErrAgentNotRunning, nil} {
		if _, err := b.ExecStart(ctx, 101, backends.ExecRequest{Path: "/bin/true"}); !errors.Is(err, want) {
			t.Fatalf("ExecStart %d: %v, want %v", i, err, want)
		}
	}
	b.Fail("Interfaces", -1, errors.New("down"))
	b.Interfaces(ctx, 101)
	if _, err := b.Interfaces(ctx, 101); err == nil {
		t.Fatal("a lasting fault healed itself")
	}
	b.Heal("Interfaces")
	if _, err := b.Interfaces(ctx, 101); err != nil {
		t.Fatal(err)
	}
	b.Hook("Eject", func(ctx context.Context, c Call) error {
		b.UpdateVM(c.VMID, func(vm *backends.VM) { vm.Name = "renamed" })
		return nil
	})
	b.Eject(ctx, 101)
	if vm, _ := b.Info(101); vm.Name != "renamed" {
		t.Fatalf("the hook did not run: %+v", vm)
	}
}

func TestScreen(t *testing.T) {
	b, ctx := fixture(t)
	if _, err := b.Console(ctx, 102); !errors.Is(err, backends.ErrNotRunning) {
		t.Fatalf("console of a stopped VM: %v", err)
	}
	s, err := b.Console(ctx, 101)
	if err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, 4, 3))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	b.Screen(101).SetFrame(img)
	f, at, err := s.Frame(ctx)
	if err != nil || f.Rect != img.Rect || f.RGBAAt(1, 1) != img.RGBAAt(1, 1) || at.IsZero() {
		t.Fatalf("Frame = %v, %v, %v", f.Rect, at, err)
	}
	f.Set(1, 1, color.Black) // a copy: the screen keeps its frame
	if f2, _, _ := s.Frame(ctx); f2.RGBAAt(1, 1) != img.RGBAAt(1, 1) {
		t.Fatal("Frame answered the screen's own image")
	}
	s.Key(ctx, "ctrl-alt-f2")
	s.Type(ctx, "hi")
	s.Click(ctx, 1, 2, backends.Right, 2)
	s.Drag(ctx, 1, 2, 3, 4)
	s.Wheel(ctx, 1, 2, -3)
	s.Move(ctx, 5, 6)
	want := []string{"Console 102", "Console 101", "Key 101 ctrl-alt-f2", "Type 101 hi", "Click 101 1 2 right 2",
		"Drag 101 1 2 3 4", "Wheel 101 1 2 -3", "Move 101 5 6"}
	if got := b.Calls(); !slices.Equal(got, want) {
		t.Fatalf("calls %q", got)
	}
	if d, _ := b.Screendump(ctx, 101); d.Bounds() != img.Rect {
		t.Fatalf("Screendump %v", d.Bounds())
	}
}

func TestIdentity(t *testing.T) {
	b, ctx := fixture(t)
	var be backends.Backend = b
	if _, ok := be.(backends.Identity); ok {
		t.Fatal("the plain fake serves Identity")
	}
	be = b.WithIdentity("alice", "alice", "shared")
	owner, pools, err := be.(backends.Identity).Identity(ctx)
	if err != nil || owner != "alice" || !slices.Equal(pools, []string{"alice", "shared"}) {
		t.Fatalf("Identity = %q %v %v", owner, pools, err)
	}
	if _, ok := be.(backends.Guest); !ok {
		t.Fatal("WithIdentity lost a capability")
	}
}

func waitHere(ch chan struct{}) { <-ch }

func TestParked(t *testing.T) {
	ch := make(chan struct{})
	done := make(chan struct{})
	if Parked("backendtest.waitHere") {
		t.Fatal("parked before it ran")
	}
	go func() { waitHere(ch); close(done) }()
	WaitParked(t, "backendtest.waitHere", nil)
	if Parked("backendtest.TestParked") {
		t.Fatal("a running test counts as parked")
	}
	close(ch)
	<-done
	if Parked("backendtest.waitHere") {
		t.Fatal("parked after it returned")
	}
}
