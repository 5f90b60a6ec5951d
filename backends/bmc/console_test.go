package bmc

import (
	"context"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/bmc/redfishtest"
	"github.com/poligon/poligon/backends/qmp"
)

// A dell bench's screen is the iDRAC's capture: the VM's console, frame
// for frame what QEMU's own screendump shows; input is refused clearly.
func TestConsoleDell(t *testing.T) {
	machine(t)
	ensureOn(t)
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
	b := benchFor(t, fake, DialectDell)
	con, err := backends.As[backends.Console](b.Backend(), "console")
	if err != nil {
		t.Fatal(err)
	}
	scr, err := con.Console(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	testQMP(t, func(ctx context.Context, c *qmp.Client) error { return c.Execute(ctx, "stop", nil, nil) })
	defer testQMP(t, func(ctx context.Context, c *qmp.Client) error { return c.Execute(ctx, "cont", nil, nil) })
	frame, changed, err := scr.Frame(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// The same screen through QMP, while the machine is stopped.
	file := filepath.Join(t.TempDir(), "want.png")
	testQMP(t, func(ctx context.Context, c *qmp.Client) error {
		return c.Execute(ctx, "screendump", map[string]string{"filename": file, "format": "png"}, nil)
	})
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if frame.Bounds().Size() != want.Bounds().Size() {
		t.Fatalf("frame %v, screendump %v", frame.Bounds(), want.Bounds())
	}
	for y := 0; y < frame.Bounds().Dy(); y += 7 {
		for x := 0; x < frame.Bounds().Dx(); x += 5 {
			r1, g1, b1, _ := frame.At(x, y).RGBA()
			r2, g2, b2, _ := want.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				t.Fatalf("pixel %d,%d differs from the screendump", x, y)
			}
		}
	}
	_, again, err := scr.Frame(ctxT(t))
	if err != nil || !again.Equal(changed) {
		t.Errorf("an unchanged screen: changed %v, then %v (%v)", changed, again, err)
	}
	err = scr.Key(ctxT(t), "ret")
	if !errors.Is(err, backends.ErrUnsupported) || backends.HintOf(err) == "" {
		t.Errorf("Key on a view-only console: %v", err)
	}
	if n := fake.OpenSessions(); n != 0 {
		t.Errorf("%d sessions left open", n)
	}
}

// Without a capture the bench is no Console: the capability error names
// the bench.
func TestConsoleMegaRAC(t *testing.T) {
	b, err := New(Config{Name: "lab3", URL: "https://10.0.0.3", User: "admin", Password: "x", Dialect: "megarac", PinSHA256: strings.Repeat("00", 32)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = backends.As[backends.Console](b.Backend(), "console")
	var ce *backends.CapabilityError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "lab3") || !strings.Contains(err.Error(), "megarac") {
		t.Fatalf("console of a MegaRAC: %v", err)
	}
	if b.NoConsoleReason() == "" {
		t.Error("no reason given")
	}
}
