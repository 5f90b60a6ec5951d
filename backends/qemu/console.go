package qemu

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
	"github.com/poligon/poligon/backends/rfb"
)

// Console answers the VM's live VNC console, connecting on first use. The
// connection stays open (the live framebuffer is what makes screenshots
// cheap) until the VM stops.
func (d *Driver) Console(ctx context.Context, vmid int) (backends.Screen, error) {
	d.mu.Lock()
	s, ok := d.screens[vmid]
	d.mu.Unlock()
	if ok {
		select {
		case <-s.Done(): // it closed itself when the VM stopped; the VM may be back
			d.dropScreen(vmid)
		default:
			if d.alive(vmid) {
				return s, nil
			}
			// The VM stopped by itself (guest poweroff, QEMU killed): the
			// cached client would serve its last frame.
			d.dropScreen(vmid)
			return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotRunning)
		}
	}
	if _, err := d.config(vmid); err != nil {
		return nil, err
	}
	if !d.alive(vmid) {
		return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotRunning)
	}
	sock := d.l.vncSocket(vmid)
	s, err := rfb.Connect(ctx, rfb.Config{
		Dial: func(ctx context.Context) (net.Conn, error) {
			if !d.alive(vmid) { // the client then closes itself, quietly
				return nil, fmt.Errorf("vmid %d: %w", vmid, backends.ErrNotRunning)
			}
			var dialer net.Dialer
			return dialer.DialContext(ctx, "unix", sock)
		},
		KeyDelay: 5 * time.Millisecond, // above QEMU's key-delay-ms=4: no key is dropped
		Logger:   d.log.With("vmid", vmid),
		Dump:     d.opts.ConsoleDump,
	})
	if err != nil {
		return nil, fmt.Errorf("vmid %d console: %w", vmid, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if other, ok := d.screens[vmid]; ok {
		s.Close()
		return other, nil
	}
	d.screens[vmid] = s
	return s, nil
}

// Consoles answers how many console connections are open (for metrics).
func (d *Driver) Consoles() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.screens)
}

var dumpSeq atomic.Uint64

// Screendump takes a screenshot through QMP: QEMU writes a PNG on this host,
// which is read back and removed.
func (d *Driver) Screendump(ctx context.Context, vmid int) (image.Image, error) {
	file := filepath.Join(d.l.runDir(vmid), "dump-"+strconv.FormatUint(dumpSeq.Add(1), 10)+".png")
	defer os.Remove(file)
	err := d.monitorDo(ctx, vmid, func(c *qmp.Client) error { return c.Screendump(ctx, file) })
	if err != nil {
		return nil, fmt.Errorf("vmid %d screendump: %w", vmid, err)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return png.Decode(f)
}
