package ocr

import (
	"context"
	"image"
	"slices"
	"strings"
	"testing"
	"time"
)

// make demo's screen, on a real tiny VM: busybox's banner and the prompt
// read exactly, in Latin letters (rus+eng once read the banner as
// "ВизуВох v1.35.0 (Debian 1:1.35.0-4+deb12ui+b1)" and the prompt as
// "tiny: 78"), with the text cursor blinking after the prompt.
func TestDemoScreen(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	r := reader(t)
	g := bootGuest(t, "tiny", tinyVMID)
	version := strings.TrimSpace(g.sh("busybox 2>&1 | head -n 1")) // BusyBox v1.35.0 (Debian 1:1.35.0-4+deb12u1+b1) multi-call binary.
	banner := strings.TrimSuffix(version, " multi-call binary.") + " built-in shell (ash)"
	// As make demo does: type, press Enter, look.
	g.typeText("echo hello from poligon")
	g.key("ret")
	for _, want := range []bool{true, false} { // the cursor shown, then hidden (it blinks)
		var got []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			img := g.frame()
			p, err := r.Read(context.Background(), img)
			if err != nil {
				t.Fatal(err)
			}
			got = texts(p)
			if len(p.Lines) > 0 && cursorShown(img, p.Lines[len(p.Lines)-1]) == want && slices.Contains(got, "hello from poligon") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no frame with the output and the cursor shown=%v in 30 s; read %q", want, got)
			}
		}
		if !slices.Contains(got, banner) || !strings.HasPrefix(banner, "BusyBox v1.35.0 (Debian 1:1.35.0-4+deb12u1") {
			t.Errorf("cursor shown=%v: no line %q in %q", want, banner, got)
		}
		if got[len(got)-1] != "tiny:~#" || !slices.Contains(got, "tiny:~# echo hello from poligon") {
			t.Errorf("cursor shown=%v: the prompts read %q", want, got)
		}
	}
}

// cursorShown reports whether the VGA console's underline cursor is drawn
// in the cell after the prompt "tiny:~# " of line l (a frame taken while
// it blinks off has none).
func cursorShown(img *image.RGBA, l Line) bool {
	x0, y0 := 8*9, l.Box.Min.Y/16*16
	for y := y0 + 12; y < y0+16; y++ {
		for x := x0; x < x0+9; x++ {
			if c := img.RGBAAt(x, y); c.R+c.G+c.B > 0 {
				return true
			}
		}
	}
	return false
}
