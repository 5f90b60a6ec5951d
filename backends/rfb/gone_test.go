package rfb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/internal/testvm"
)

// stoppingDialer serves until stop, then answers what a backend says of a
// stopped VM.
type stoppingDialer struct {
	srv     *fakeServer
	mu      sync.Mutex
	stopped bool
	conns   []net.Conn
}

func (d *stoppingDialer) dial(ctx context.Context) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return nil, fmt.Errorf("vmid 100: the VM is stopped: %w", backends.ErrNotRunning)
	}
	c, err := d.srv.dial(ctx)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *stoppingDialer) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	for _, c := range d.conns {
		c.Close()
	}
}

// A client whose redial says the VM is not running stops for good and
// says so in its errors, without warning about it: a stopped VM is no
// failure of the connection.
func TestAClientWhoseVMStoppedClosesQuietly(t *testing.T) {
	d := &stoppingDialer{srv: newFakeServer(t)}
	var log testvm.SyncBuffer
	c := connect(t, Config{Dial: d.dial, KeyDelay: -1,
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	d.stop()
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
	d.srv.mu.Lock()
	dials := d.srv.dials
	d.srv.mu.Unlock()
	if dials != 1 {
		t.Errorf("%d connections for one session; want the first only", dials)
	}
}
