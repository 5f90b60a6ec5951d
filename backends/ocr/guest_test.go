package ocr

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/internal/testvm"
)

// guest is a real VM booted from a template for the tests that need a
// screen only a guest draws (the corpus capture, the demo's screen).
type guest struct {
	t    testing.TB
	d    *qemu.Driver
	vmid int
}

// Template vmids (images/*/build.sh).
const (
	tinyVMID          = 9000
	tinyXVMID         = 9001
	debianVMID        = 9010
	debianDesktopVMID = 9020
)

// bootGuest clones the template (linked), starts it and waits for its
// guest agent; the VM is destroyed when the test ends.
func bootGuest(t testing.TB, template string, vmid int) *guest {
	t.Helper()
	var more []string
	if template != "tiny" {
		more = append(more, template)
	}
	d, err := qemu.New(qemu.Options{DataDir: testvm.DataDir(t, more...), StopGrace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	id, task, err := d.Clone(ctx, backends.CloneRequest{Template: vmid, Name: "ocr-" + template})
	if err != nil {
		t.Fatal(err)
	}
	g := &guest{t: t, d: d, vmid: id}
	g.wait(task)
	t.Cleanup(func() {
		if task, err := d.Destroy(context.Background(), id); err == nil {
			d.WaitTask(context.Background(), task.ID)
		}
	})
	task, err = d.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	g.wait(task)
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := d.GuestPing(pctx, id)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s guest's agent did not answer in 4 minutes: %v", template, err)
		}
	}
	return g
}

func (g *guest) wait(task backends.Task) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := g.d.WaitTask(ctx, task.ID)
	if err != nil {
		g.t.Fatal(err)
	}
	if st.Running || st.Failed() {
		g.t.Fatalf("task %s: %+v", task.ID, st)
	}
}

// sh runs a shell command as root in the guest and answers its standard
// output; a command that fails fails the test.
func (g *guest) sh(cmd string) string {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pid, err := g.d.ExecStart(ctx, g.vmid, backends.ExecRequest{Path: "/bin/sh", Args: []string{"-c", cmd}})
	if err != nil {
		g.t.Fatalf("exec %q: %v", cmd, err)
	}
	for {
		st, err := g.d.ExecStatus(ctx, g.vmid, pid)
		if err != nil {
			g.t.Fatalf("exec %q: %v", cmd, err)
		}
		if st.Exited {
			if st.ExitCode != 0 {
				g.t.Fatalf("exec %q: exit %d: %s", cmd, st.ExitCode, st.Stderr)
			}
			return string(st.Stdout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor runs cmd in the guest every second until it succeeds, at most
// for d.
func (g *guest) waitFor(cmd string, d time.Duration) {
	g.t.Helper()
	for deadline := time.Now().Add(d); !g.try(cmd); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			g.t.Fatalf("%q did not succeed in %s", cmd, d)
		}
	}
}

// try runs cmd in the guest (at most 90 s) and reports whether it succeeded.
func (g *guest) try(cmd string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pid, err := g.d.ExecStart(ctx, g.vmid, backends.ExecRequest{Path: "/bin/sh", Args: []string{"-c", cmd}})
	for err == nil {
		var st backends.ExecStatus
		if st, err = g.d.ExecStatus(ctx, g.vmid, pid); err == nil && st.Exited {
			return st.ExitCode == 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// write puts a file into the guest.
func (g *guest) write(path, content string) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := g.d.WriteFile(ctx, g.vmid, path, []byte(content)); err != nil {
		g.t.Fatalf("writing %s: %v", path, err)
	}
}

func (g *guest) screen() backends.Screen {
	g.t.Helper()
	s, err := g.d.Console(context.Background(), g.vmid)
	if err != nil {
		g.t.Fatal(err)
	}
	return s
}

// frame answers the screen as it is now.
func (g *guest) frame() *image.RGBA {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := g.screen()
	var img *image.RGBA
	var err error
	if f, ok := s.(backends.FreshScreen); ok {
		img, _, err = f.FreshFrame(ctx)
	} else {
		img, _, err = s.Frame(ctx)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	return img
}

// still answers the screen once two frames 300 ms apart are the same
// (a blinking cursor aside: its frames alternate, so the test hides it).
func (g *guest) still() *image.RGBA {
	g.t.Helper()
	prev := g.frame()
	for deadline := time.Now().Add(60 * time.Second); ; {
		time.Sleep(300 * time.Millisecond)
		cur := g.frame()
		if bytes.Equal(prev.Pix, cur.Pix) && prev.Bounds() == cur.Bounds() {
			return cur
		}
		if time.Now().After(deadline) {
			g.t.Fatal("the screen did not settle in 60 s")
		}
		prev = cur
	}
}

// blinking answers the screen once it changes no more but for a blinking
// text cursor: frames taken 100 ms apart for 1.5 s are all one of two
// images that differ in less than a character cell's area. It answers the
// one with the cursor shown (the one with more pixels unlike the corner's
// colour), and the other.
func (g *guest) blinking() (on, off *image.RGBA) {
	g.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		var seen []*image.RGBA
		ok := true
		for i := 0; i < 15 && ok; i++ {
			f := g.frame()
			known := false
			for _, s := range seen {
				known = known || bytes.Equal(s.Pix, f.Pix)
			}
			if !known {
				seen = append(seen, f)
			}
			ok = len(seen) <= 2
			time.Sleep(100 * time.Millisecond)
		}
		if !ok || len(seen) != 2 || differing(seen[0], seen[1]) > 40*40 {
			continue
		}
		if inked(seen[0]) < inked(seen[1]) {
			return seen[1], seen[0]
		}
		return seen[0], seen[1]
	}
	g.t.Fatal("the screen did not settle to a blinking cursor in 60 s")
	return nil, nil
}

// differing counts the pixels where a and b differ.
func differing(a, b *image.RGBA) int {
	n := 0
	for i := 0; i+3 < len(a.Pix); i += 4 {
		if a.Pix[i] != b.Pix[i] || a.Pix[i+1] != b.Pix[i+1] || a.Pix[i+2] != b.Pix[i+2] {
			n++
		}
	}
	return n
}

// inked counts the pixels unlike the top left corner's.
func inked(a *image.RGBA) int {
	n := 0
	for i := 0; i+3 < len(a.Pix); i += 4 {
		if a.Pix[i] != a.Pix[0] || a.Pix[i+1] != a.Pix[1] || a.Pix[i+2] != a.Pix[2] {
			n++
		}
	}
	return n
}

// typeText types text on the console.
func (g *guest) typeText(text string) {
	g.t.Helper()
	if err := g.screen().Type(context.Background(), text); err != nil {
		g.t.Fatal(err)
	}
}

func (g *guest) key(combo string) {
	g.t.Helper()
	if err := g.screen().Key(context.Background(), combo); err != nil {
		g.t.Fatal(err)
	}
}

// savePNG writes img, compressed hard (the corpus is checked in).
func savePNG(t testing.TB, path string, img image.Image) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
