package hostapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/hostapi"
)

// A watcher looks without the lock: while a call holds the VM, its frame
// is still read, and a VM of another owner cannot be watched at all.
func TestWatchWithoutTheLock(t *testing.T) {
	be, env, ctx := bench(t)
	c := alice(t, ctx, env, be)
	if _, err := c.Watch(ctx, 102); err == nil || !strings.Contains(err.Error(), "not yours") {
		t.Fatalf("watching bob's VM: %v", err)
	}
	w, err := c.Watch(ctx, 101)
	if err != nil {
		t.Fatal(err)
	}
	lock(t, ctx, c, 101) // a call holds it
	f, err := w.Frame(ctx)
	if err != nil || f.Image == nil {
		t.Fatalf("a frame while the VM is held: %v", err)
	}
	if _, ok := c.LastFrame(101); ok {
		t.Fatal("a watcher's look became the VM's last frame: it is no call's")
	}
	if _, ok := c.LastFrame(105); ok {
		t.Fatal("a VM nobody looked at has a last frame")
	}
}

// An observed call notes each VM it held, once, and a shot is its VM's last
// frame.
func TestObserveNotesTheVMsHeld(t *testing.T) {
	be, env, ctx := bench(t)
	c := alice(t, ctx, env, be)
	octx, obs := hostapi.Observe(ctx)
	v, release := lock(t, octx, c, 101)
	shot, err := v.Shot(octx)
	if err != nil {
		t.Fatal(err)
	}
	release()
	_, release2 := lock(t, octx, c, 101)
	release2()
	lock(t, octx, c, 105)
	var ids []int
	for _, w := range obs.VMs() {
		ids = append(ids, w.VM().VMID)
	}
	if len(ids) != 2 || ids[0] != 101 || ids[1] != 105 {
		t.Fatalf("observed VMs %v, want [101 105]", ids)
	}
	if last, ok := c.LastFrame(101); !ok || last.Image != shot.Image || time.Since(last.At) > time.Minute {
		t.Fatal("the shot is not the VM's last frame")
	}
}
