package qmp

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/poligon/poligon/internal/testvm"
)

func TestHumanMonitorCommand(t *testing.T) {
	c := startQEMU(t).dial(t)
	ctx := testContext(t)
	out, err := c.HumanMonitorCommand(ctx, "info status")
	if err != nil || !strings.Contains(out, "running") {
		t.Fatalf("info status: %q, %v", out, err)
	}
	if _, err := c.HumanMonitorCommand(ctx, "loadvm nope"); err == nil || strings.HasPrefix(err.Error(), "Error:") {
		t.Fatalf("loadvm of nothing: got %v, want an error carrying HMP's message", err)
	}
}

func TestScreendumpWritesAPNG(t *testing.T) {
	c := startQEMU(t, "-vga", "std").dial(t)
	path := filepath.Join(t.TempDir(), "screen.png")
	if err := c.Screendump(testContext(t), path); err != nil {
		t.Fatal(err)
	}
	img := testvm.LoadPNG(t, path)
	if b := img.Bounds(); b.Dx() < 320 || b.Dy() < 200 {
		t.Fatalf("screen of %v", b)
	}
}

func TestScreendumpWithoutDisplayFails(t *testing.T) {
	c := startQEMU(t).dial(t)
	if err := c.Screendump(testContext(t), filepath.Join(t.TempDir(), "x.png")); errorClass(err) == "" {
		t.Fatalf("screendump with no display device: got %v, want a QMP error", err)
	}
}

func BenchmarkScreendump(b *testing.B) {
	c := startQEMU(b, "-vga", "std").dial(b)
	ctx := testContext(b)
	path := filepath.Join(b.TempDir(), "screen.png")
	for b.Loop() {
		if err := c.Screendump(ctx, path); err != nil {
			b.Fatal(err)
		}
	}
}
