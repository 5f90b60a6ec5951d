package bmc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/bmc/redfishtest"
)

// isoImage is an image of an odd size (3 MiB + 6 KiB, in 2 KiB sectors)
// that starts with a marker, so the guest can tell it from any other.
func isoImage(marker string) []byte {
	data := make([]byte, 3<<20+6<<10)
	copy(data, marker)
	for i := len(marker); i < len(data); i++ {
		data[i] = byte(i * 7)
	}
	return data
}

// guestCD answers what the guest sees in its CD drive: the first bytes
// and the size, or "none" without a medium. The first read after a media
// change fails (the drive reports UNIT ATTENTION), as on real hardware.
func guestCD(t *testing.T, n int) string {
	t.Helper()
	return strings.TrimSpace(guest(t, fmt.Sprintf(
		"head -c 1 /dev/sr0 >/dev/null 2>&1; if m=$(head -c %d /dev/sr0 2>/dev/null); then echo \"$m $(blockdev --getsize64 /dev/sr0)\"; else echo none; fi", n)))
}

func TestMediaMountEject(t *testing.T) {
	for _, tc := range []struct {
		dialect string
		fake    redfishtest.Dialect
	}{
		{DialectDell, redfishtest.Dell},
		{DialectMegaRAC, redfishtest.MegaRAC},
		{DialectSupermicro, redfishtest.Supermicro},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			ensureAgent(t)
			ensureNoMedia(t)
			fake := startFake(t, redfishtest.Options{Dialect: tc.fake})
			b := benchFor(t, fake, tc.dialect)
			ctx := ctxT(t)
			marker := "POLIGON-" + strings.ToUpper(tc.dialect)
			data := isoImage(marker)
			url := imageServer(t, "install-"+tc.dialect+".iso", data)

			if imgs, st, err := b.MediaList(ctx); err != nil || len(imgs) != 0 || st.Connected {
				t.Fatalf("before: MediaList = %v, %+v, %v; want nothing", imgs, st, err)
			}
			if err := b.MediaMount(ctx, backends.MediaMount{URL: url, BootOnce: true}); err != nil {
				t.Fatal(err)
			}
			if got, want := guestCD(t, len(marker)), fmt.Sprintf("%s %d", marker, len(data)); got != want {
				t.Fatalf("the guest's /dev/sr0: %q, want %q", got, want)
			}
			imgs, st, err := b.MediaList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(imgs) != 1 || imgs[0].Name != url || st != (backends.MediaState{Connected: true, Image: url, Mode: "cd"}) {
				t.Fatalf("MediaList = %v, %+v", imgs, st)
			}
			// Mounting another image replaces the first.
			data2 := isoImage(marker + "-TWO")
			url2 := imageServer(t, "second.iso", data2[:2<<20])
			if err := b.MediaMount(ctx, backends.MediaMount{URL: url2}); err != nil {
				t.Fatal(err)
			}
			if got, want := guestCD(t, len(marker)+4), fmt.Sprintf("%s-TWO %d", marker, 2<<20); got != want {
				t.Fatalf("after the second mount the guest's /dev/sr0: %q, want %q", got, want)
			}
			if err := b.MediaEject(ctx); err != nil {
				t.Fatal(err)
			}
			if got := guestCD(t, 4); got != "none" {
				t.Fatalf("after eject the guest's /dev/sr0: %q", got)
			}
			if err := b.MediaEject(ctx); err != nil { // an empty drive
				t.Fatalf("ejecting an empty drive: %v", err)
			}
			if n := fake.OpenSessions(); n != 0 {
				t.Errorf("%d sessions left open", n)
			}
			checkDialectWire(t, tc.dialect, fake)
		})
	}
}

// checkDialectWire checks that each vendor got the requests it takes.
func checkDialectWire(t *testing.T, dialect string, fake *redfishtest.Server) {
	t.Helper()
	var inserts, patches []redfishtest.Request
	enabled := false
	for _, r := range fake.Requests() {
		switch {
		case strings.HasSuffix(r.Path, "/VirtualMedia.InsertMedia"):
			inserts = append(inserts, r)
		case r.Method == "PATCH":
			patches = append(patches, r)
		case strings.HasSuffix(r.Path, "AMIVirtualMedia.EnableRMedia"):
			enabled = true
		}
	}
	for _, r := range inserts {
		if r.Status != 204 {
			t.Errorf("an InsertMedia was refused (%d): %s", r.Status, r.Body)
		}
		switch dialect {
		case DialectMegaRAC:
			if !strings.Contains(r.Body, `"TransferProtocolType":"HTTP"`) {
				t.Errorf("MegaRAC InsertMedia without TransferProtocolType: %s", r.Body)
			}
		case DialectSupermicro:
			if strings.Contains(r.Body, "Inserted") || strings.Contains(r.Body, "WriteProtected") {
				t.Errorf("Supermicro InsertMedia with Inserted/WriteProtected: %s", r.Body)
			}
		case DialectDell:
			if !strings.Contains(r.Body, `"Inserted":true`) {
				t.Errorf("Dell InsertMedia body: %s", r.Body)
			}
		}
	}
	if enabled != (dialect == DialectMegaRAC) {
		t.Errorf("EnableRMedia sent: %v", enabled)
	}
	// The boot override: only target and Once, with the system's ETag.
	if len(patches) != 1 {
		t.Fatalf("PATCHes: %v", patches)
	}
	p := patches[0]
	if p.Status != 204 || p.IfMatch == "" || strings.Contains(p.Body, "BootSourceOverrideMode") ||
		!strings.Contains(p.Body, `"BootSourceOverrideTarget":"Cd"`) || !strings.Contains(p.Body, `"BootSourceOverrideEnabled":"Once"`) {
		t.Errorf("boot override PATCH: %+v", p)
	}
}

// The boot override to CD holds for the next boot only.
func TestMediaBootOnce(t *testing.T) {
	ensureAgent(t)
	ensureNoMedia(t)
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC})
	b := benchFor(t, fake, DialectMegaRAC)
	ctx := ctxT(t)
	url := imageServer(t, "boot.iso", isoImage("BOOT"))
	if err := b.MediaMount(ctx, backends.MediaMount{URL: url, BootOnce: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Power(ctx, backends.PowerReset); err != nil {
			t.Fatal(err)
		}
	}
	if got := fake.Boots(); !slices.Equal(got, []string{"Cd", "None"}) {
		t.Errorf("boots: %v, want [Cd None]", got)
	}
	if err := b.MediaEject(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMediaRefusals(t *testing.T) {
	machine(t)
	fake := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
	b := benchFor(t, fake, DialectDell)
	ctx := ctxT(t)

	// A BMC keeps no images: a bare name is refused before any request.
	err := b.MediaMount(ctx, backends.MediaMount{Image: "debian.iso"})
	if err == nil || backends.HintOf(err) == "" {
		t.Errorf("a bare image name: %v, want an error with a hint", err)
	}
	if err := b.MediaMount(ctx, backends.MediaMount{URL: "ftp://x/y.iso"}); err == nil {
		t.Error("an ftp URL was accepted")
	}
	if len(fake.Requests()) != 0 {
		t.Errorf("refused mounts reached the BMC: %v", fake.Requests())
	}
	// The BMC cannot fetch the image: iDRAC's RAC0904, in its words; the
	// share's password is not in the error.
	err = b.MediaMount(ctx, backends.MediaMount{URL: "http://user:Share-Pw-555@127.0.0.1:1/missing.iso"})
	if err == nil || !strings.Contains(err.Error(), "RAC0904") || backends.HintOf(err) == "" {
		t.Fatalf("an unreachable image: %v, want the BMC's RAC0904", err)
	}
	secretFree(t, "the unreachable-image error", err.Error(), "Share-Pw-555")
	// No flash drive on this BMC.
	err = b.MediaMount(ctx, backends.MediaMount{URL: "http://127.0.0.1:1/x.img", Mode: "flash"})
	if !errors.Is(err, backends.ErrUnsupported) || !strings.Contains(err.Error(), "CD, DVD") {
		t.Errorf("flash mode on a CD-only BMC: %v", err)
	}
	if n := fake.OpenSessions(); n != 0 {
		t.Errorf("%d sessions left open", n)
	}
}
