package pve

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve/pvetest"
	"github.com/poligon/poligon/backends/rfb"
	"github.com/poligon/poligon/internal/testvm"
)

// consoleVM is a running VM whose console is the real QEMU's VNC server
// behind the test server's websocket proxy.
func consoleVM(t *testing.T) (*cluster, *Backend, int) {
	t.Helper()
	c := newCluster(t, pvetest.Options{Console: true})
	b := c.backend(t, c.alice)
	vmid := cloneVM(t, b, "alice-repro-screen")
	startVM(t, b, vmid)
	return c, b, vmid
}

// frame reads a frame, failing the test if there is none.
func frame(t *testing.T, ctx context.Context, s backends.Screen) {
	t.Helper()
	img, _, err := s.Frame(ctx)
	if err != nil {
		t.Fatalf("Frame: %v", err)
	}
	if img.Rect.Dx() < 320 || img.Rect.Dy() < 200 {
		t.Fatalf("frame of %v; want a VGA screen", img.Rect)
	}
}

func TestConsoleOverWebsocketWithVNCAuth(t *testing.T) {
	c, b, vmid := consoleVM(t)
	ctx := testContext(t, 40*time.Second)
	screen, err := b.Console(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	frame(t, ctx, screen)

	// The console is cached per endpoint and token: the next call (from
	// another Backend of the same token) opens nothing new.
	proxies := c.srv.Hits("POST", "/nodes/pve1/qemu/"+strconv.Itoa(vmid)+"/vncproxy")
	again, err := c.backend(t, c.alice).Console(ctx, vmid)
	if err != nil || again != screen {
		t.Fatalf("second Console = %v, %v; want the cached screen", again, err)
	}
	if n := c.srv.Hits("POST", "/nodes/pve1/qemu/"+strconv.Itoa(vmid)+"/vncproxy"); n != proxies {
		t.Errorf("the cached console asked for %d more tickets", n-proxies)
	}
	if err := screen.Key(ctx, "ret"); err != nil {
		t.Errorf("Key over the websocket: %v", err)
	}
}

func TestConsoleReconnectsAfterADroppedWebsocket(t *testing.T) {
	c, b, vmid := consoleVM(t)
	ctx := testContext(t, 60*time.Second)
	screen, err := b.Console(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	frame(t, ctx, screen)
	if n := c.srv.DropConsoles(); n != 1 {
		t.Fatalf("dropped %d websockets; want 1", n)
	}
	for {
		open, accepted := c.srv.ConsoleConnections()
		if open == 1 && accepted >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the console did not reconnect: %d open, %d accepted", open, accepted)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := screen.Key(ctx, "ret"); err != nil {
		t.Fatalf("Key after the reconnect: %v", err)
	}
	frame(t, ctx, screen)
}

func TestConsoleRetriesAnExpiredTicket(t *testing.T) {
	c, b, vmid := consoleVM(t)
	ctx := testContext(t, 40*time.Second)
	c.srv.ExpireNextTickets(1)
	screen, err := b.Console(ctx, vmid)
	if err != nil {
		t.Fatalf("Console with a first ticket that expired: %v", err)
	}
	frame(t, ctx, screen)
	if n := c.srv.Hits("POST", "/nodes/pve1/qemu/"+strconv.Itoa(vmid)+"/vncproxy"); n != 2 {
		t.Errorf("%d vncproxy calls; want 2 (the expired ticket, then a fresh one)", n)
	}
}

func TestConsoleOfAStoppedVMFails(t *testing.T) {
	c := newCluster(t, pvetest.Options{Console: true})
	b := c.backend(t, c.alice)
	vmid := cloneVM(t, b, "alice-repro-dark")
	_, err := b.Console(testContext(t, 3*time.Second), vmid)
	if !errors.Is(err, backends.ErrNotRunning) {
		t.Fatalf("Console of a stopped VM = %v; want ErrNotRunning", err)
	}
}

// A VM that stops takes its console with it: the client's redial finds
// the VM stopped and closes the console, without a warning (issue 9 saw
// "reconnecting failed" every few seconds), and the next Console call after
// a start opens a new one.
func TestTheConsoleOfAVMThatStopsClosesQuietly(t *testing.T) {
	c := newCluster(t, pvetest.Options{Console: true})
	var logs testvm.SyncBuffer
	b := c.backend(t, c.alice, func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	vmid := cloneVM(t, b, "alice-repro-off")
	startVM(t, b, vmid)
	ctx := testContext(t, 40*time.Second)
	screen, err := b.Console(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	frame(t, ctx, screen)
	task, err := b.Stop(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	select {
	case <-screen.(*rfb.Client).Done():
	case <-ctx.Done():
		t.Fatal("the console of the stopped VM is still open")
	}
	if _, _, err := screen.Frame(ctx); !errors.Is(err, backends.ErrNotRunning) {
		t.Errorf("Frame of the closed console = %v; want ErrNotRunning", err)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the stop was logged as a warning:\n%s", logs.String())
	}
	if open := c.srv.OpenConsolesAfter(10 * time.Second); open != 0 {
		t.Errorf("%d console websockets still open", open)
	}
	startVM(t, b, vmid)
	again, err := b.Console(ctx, vmid)
	if err != nil || again == screen {
		t.Fatalf("Console after the restart = %v, %v; want a new console", again, err)
	}
	frame(t, ctx, again)
}

func TestDestroyClosesTheConsole(t *testing.T) {
	c, b, vmid := consoleVM(t)
	ctx := testContext(t, 40*time.Second)
	screen, err := b.Console(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	task, err := b.Destroy(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, b, task)
	if _, _, err := screen.Frame(ctx); err == nil {
		t.Error("the console of a destroyed VM still answers frames")
	}
	if open := c.srv.OpenConsolesAfter(10 * time.Second); open != 0 {
		t.Errorf("%d console websockets still open", open)
	}
}

func TestSendKey(t *testing.T) {
	c := newCluster(t, pvetest.Options{})
	b := c.backend(t, c.alice)
	vmid := cloneVM(t, b, "alice-repro-keys")
	startVM(t, b, vmid)
	if err := b.SendKey(testContext(t, 10*time.Second), vmid, "ctrl-alt-delete"); err != nil {
		t.Fatal(err)
	}
	if vm, _ := c.srv.VM(vmid); len(vm.Keys) != 1 || vm.Keys[0] != "ctrl-alt-delete" {
		t.Errorf("keys the server got: %v", vm.Keys)
	}
}

// BenchmarkConsoleOpen is vncproxy + websocket + RFB handshake with VNC
// auth + the first frame, against the real QEMU.
func BenchmarkConsoleOpen(b *testing.B) {
	c := newCluster(b, pvetest.Options{Console: true})
	be := c.backend(b, c.alice)
	vmid := cloneVM(b, be, "alice-repro-bench")
	startVM(b, be, vmid)
	ctx := testContext(b, time.Minute)
	b.ResetTimer()
	for b.Loop() {
		if _, err := be.Console(ctx, vmid); err != nil {
			b.Fatal(err)
		}
		be.CloseConsoles()
	}
}
