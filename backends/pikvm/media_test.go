package pikvm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qga"
)

func imageData(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	return data
}

func sum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// serveImages serves files over plain HTTP, as a storage would.
func serveImages(t testing.TB, files map[string][]byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// guestDisk waits until the guest's block device dev has size bytes and
// answers the SHA-256 of its contents.
func guestDisk(t testing.TB, a *qga.Client, dev string, size int) string {
	t.Helper()
	ctx := testContext(t)
	want := strconv.Itoa(size)
	var got string
	if err := eventually(ctx, func() bool {
		out, _ := guest(ctx, a, "blockdev --getsize64 /dev/"+dev+" 2>&1")
		got = strings.TrimSpace(out)
		return got == want
	}); err != nil {
		t.Fatalf("the guest's /dev/%s has size %q, want %s", dev, got, want)
	}
	out := mustGuest(t, a, "sha256sum /dev/"+dev)
	return strings.Fields(out)[0]
}

// The drive presents images to the machine: a URL downloaded by the PiKVM
// and connected as a CD is the guest's /dev/sr0 with the same bytes; an
// image by name as flash is a USB disk; eject takes it away; nothing
// changes while the drive is connected, and the bench works around that.
func TestMedia(t *testing.T) {
	vm, agent := machine(t)
	srv := startFake(t, fakeOpts(vm))
	b := newBench(t, srv, nil)
	ctx := testContext(t)
	iso := imageData(3<<20, 1)
	files := serveImages(t, map[string][]byte{"isos/install.iso": iso})

	images, st, err := b.MediaList(ctx)
	if err != nil {
		t.Fatal(seen(err))
	}
	if len(images) != 0 || st.Connected {
		t.Fatalf("a fresh PiKVM lists %v, %+v", images, st)
	}

	if err := b.MediaMount(ctx, backends.MediaMount{URL: files.URL + "/isos/install.iso"}); err != nil {
		t.Fatal(seen(err))
	}
	images, st, err = b.MediaList(ctx)
	if err != nil {
		t.Fatal(seen(err))
	}
	if len(images) != 1 || images[0] != (backends.MediaImage{Name: "install.iso", Size: 3 << 20}) {
		t.Errorf("images %v after the download", images)
	}
	if st != (backends.MediaState{Connected: true, Image: "install.iso", Mode: "cd"}) {
		t.Errorf("drive %+v after mounting", st)
	}
	if got := guestDisk(t, agent, "sr0", 3<<20); got != sum(iso) {
		t.Fatalf("the guest's CD reads %s, want the image's %s", got, sum(iso))
	}

	// kvmd's rule, on the wire: no change while connected.
	raw := rawClient(t, srv)
	for _, call := range []string{"/api/msd/set_params?image=install.iso&cdrom=0", "/api/msd/set_connected?connected=1", "/api/msd/remove?image=install.iso"} {
		if status, class, _ := rawCall(t, raw, "POST", srv.URL()+call); status != 400 || class != "MsdConnectedError" {
			t.Errorf("%s while connected answered %d %s, want 400 MsdConnectedError", call, status, class)
		}
	}

	// Upload another image (the bench disconnects first) and mount it as
	// a flash disk.
	stick := imageData(1<<20, 2)
	if err := b.MediaUpload(ctx, "stick.img", bytes.NewReader(stick), int64(len(stick))); err != nil {
		t.Fatal(seen(err))
	}
	if err := b.MediaMount(ctx, backends.MediaMount{Image: "stick.img", Mode: "flash"}); err != nil {
		t.Fatal(seen(err))
	}
	if got := guestDisk(t, agent, "sda", 1<<20); got != sum(stick) {
		t.Fatalf("the guest's USB disk reads %s, want %s", got, sum(stick))
	}
	if _, st, _ := b.MediaList(ctx); st != (backends.MediaState{Connected: true, Image: "stick.img", Mode: "flash"}) {
		t.Errorf("drive %+v after mounting the stick", st)
	}

	// Refusals change nothing.
	for _, m := range []backends.MediaMount{
		{Image: "missing.iso"},
		{URL: files.URL + "/isos/install.iso"}, // already in the storage
		{Image: "stick.img", Mode: "floppy"},
	} {
		err := b.MediaMount(ctx, m)
		if err == nil {
			t.Fatalf("mounting %+v worked", m)
		}
		seen(err)
		if _, st, _ := b.MediaList(ctx); st != (backends.MediaState{Connected: true, Image: "stick.img", Mode: "flash"}) {
			t.Fatalf("a refused mount (%v) changed the drive to %+v", err, st)
		}
	}
	if err := b.MediaMount(ctx, backends.MediaMount{Image: "missing.iso"}); !errors.Is(err, backends.ErrNotFound) || !strings.Contains(backends.HintOf(err), "install.iso") {
		t.Errorf("a missing image answered %v (hint %q), want ErrNotFound listing the images", err, backends.HintOf(err))
	}

	if err := b.MediaEject(ctx); err != nil {
		t.Fatal(seen(err))
	}
	ctx2 := testContext(t)
	if err := eventually(ctx2, func() bool { _, err := guest(ctx2, agent, "test ! -e /dev/sda"); return err == nil }); err != nil {
		t.Fatal("the USB disk stayed in the guest after eject")
	}
	if err := b.MediaEject(ctx); err != nil { // an empty drive: fine
		t.Fatal(seen(err))
	}
	if status, class, _ := rawCall(t, raw, "POST", srv.URL()+"/api/msd/set_connected?connected=0"); status != 400 || class != "MsdDisconnectedError" {
		t.Errorf("disconnecting a disconnected drive answered %d %s, want kvmd's 400 MsdDisconnectedError", status, class)
	}

	// The CD again, by name; eject empties the guest's drive.
	if err := b.MediaMount(ctx, backends.MediaMount{Image: "install.iso", Mode: "cd"}); err != nil {
		t.Fatal(seen(err))
	}
	guestDisk(t, agent, "sr0", 3<<20)
	if err := b.MediaEject(ctx); err != nil {
		t.Fatal(seen(err))
	}
	if err := eventually(ctx2, func() bool {
		out, _ := guest(ctx2, agent, "blockdev --getsize64 /dev/sr0 2>&1")
		return strings.TrimSpace(out) != strconv.Itoa(3<<20)
	}); err != nil {
		t.Fatal("the CD stayed in the guest's drive after eject")
	}
}

// While the PiKVM downloads an image its drive is busy: kvmd answers 409
// and the bench says busy before touching anything. A download that
// breaks off is an error, not a half image in the drive.
func TestMediaBusyAndBrokenDownload(t *testing.T) {
	vm, _ := machine(t)
	srv := startFake(t, fakeOpts(vm))
	b := newBench(t, srv, nil)
	ctx := testContext(t)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(2<<20))
		switch r.URL.Path {
		case "/slow.iso":
			w.Write(make([]byte, 1<<20))
			w.(http.Flusher).Flush()
			<-release
			w.Write(make([]byte, 1<<20))
		case "/broken.iso": // the connection ends halfway
			w.Write(make([]byte, 1<<20))
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	done := make(chan error, 1)
	go func() { done <- b.MediaMount(ctx, backends.MediaMount{URL: slow.URL + "/slow.iso"}) }()
	if err := eventually(ctx, func() bool { st, err := b.msd(ctx, "test"); return err == nil && st.Busy }); err != nil {
		t.Fatal("the download never made the drive busy")
	}
	raw := rawClient(t, srv)
	if status, class, _ := rawCall(t, raw, "POST", srv.URL()+"/api/msd/set_params?cdrom=1"); status != 409 || class != "MsdIsBusyError" {
		t.Errorf("set_params during a download answered %d %s, want 409 MsdIsBusyError", status, class)
	}
	err := b.MediaMount(ctx, backends.MediaMount{Image: "slow.iso"})
	if text := seen(err); !errors.Is(err, backends.ErrBusy) || backends.HintOf(err) == "" {
		t.Errorf("a mount during a download answered %v, want ErrBusy with a hint", text)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(seen(err))
	}
	if _, st, _ := b.MediaList(ctx); !st.Connected || st.Image != "slow.iso" {
		t.Errorf("drive %+v after the slow download", st)
	}

	err = b.MediaMount(ctx, backends.MediaMount{URL: slow.URL + "/broken.iso"})
	var ae *APIError
	if text := seen(err); !errors.As(err, &ae) || ae.Class == "" || !strings.Contains(text, "download") {
		t.Fatalf("a broken download answered %v, want kvmd's error from the progress stream", text)
	}
	if !strings.Contains(err.Error(), `"slow.iso"`) {
		t.Errorf("the error does not say the drive was disconnected from slow.iso: %v", err)
	}
	for _, name := range srv.Images() {
		if name == "broken.iso" {
			t.Errorf("the broken download stayed in the storage: %v", srv.Images())
		}
	}
	if _, st, _ := b.MediaList(ctx); st.Connected {
		t.Errorf("the drive is connected (%+v) after a broken download", st)
	}
}
