package rfb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/testvm"
)

// A client whose redial says the VM is not running stops for good and
// says so in its errors, without warning about it: a stopped VM is no
// failure of the connection.
func TestAClientWhoseVMStoppedClosesQuietly(t *testing.T) {
	srv := newFakeServer(t)
	d := &flakyDialer{dial: srv.dial, err: fmt.Errorf("vmid 100: the VM is stopped: %w", backends.ErrNotRunning)}
	var log testvm.SyncBuffer
	c := connect(t, Config{Dial: d.Dial, KeyDelay: -1,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	d.cut(true) // the VM stops: its connection drops and redials say so
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the client kept redialling a stopped VM")
	}
	if _, _, err := c.Frame(context.Background()); !errors.Is(err, ErrClosed) || !errors.Is(err, backends.ErrNotRunning) {
		t.Errorf("Frame after the VM stopped = %v; want ErrClosed and ErrNotRunning", err)
	}
	if err := c.Key(context.Background(), "a"); !errors.Is(err, backends.ErrNotRunning) {
		t.Errorf("Key after the VM stopped = %v; want ErrNotRunning", err)
	}
	if strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "console closed") {
		t.Errorf("log of a VM that stopped:\n%s", log.String())
	}
	srv.mu.Lock()
	dials := srv.dials
	srv.mu.Unlock()
	if dials != 1 {
		t.Errorf("%d connections for one session; want the first only", dials)
	}
}
