package rfb

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// POLIGON_MCP_DUMP: a console session's server-to-client bytes land in the
// file, from the version string on, the first frame's pixels included.
func TestDumpRecordsServerBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.rfb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := newFakeServer(t)
	c := connect(t, Config{Dial: srv.dial, Dump: f})
	img, _, err := c.Frame(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	srv.finished()
	f.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("RFB 003.008\n")) {
		t.Fatalf("the dump begins %q", raw[:min(len(raw), 16)])
	}
	// The handshake (12 + security + init) and one raw frame of 4 bytes a pixel.
	if min := 12 + 4*img.Bounds().Dx()*img.Bounds().Dy(); len(raw) < min {
		t.Fatalf("the dump holds %d bytes, less than the session's %d", len(raw), min)
	}
}
