package pikvm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path"
	"sort"
	"strings"

	"github.com/poligon/poligon/backends"
)

// msdState is GET /api/msd (kvmd's OTG mass-storage drive).
type msdState struct {
	Enabled bool `json:"enabled"`
	Online  bool `json:"online"`
	Busy    bool `json:"busy"`
	Storage *struct {
		Images map[string]struct {
			Size     int64 `json:"size"`
			Complete bool  `json:"complete"`
		} `json:"images"`
	} `json:"storage"`
	Drive *struct {
		Image *struct {
			Name string `json:"name"`
		} `json:"image"`
		Connected bool `json:"connected"`
		CDROM     bool `json:"cdrom"`
	} `json:"drive"`
}

// msd reads the drive's state; a drive that is off or missing is an error.
func (b *Bench) msd(ctx context.Context, op string) (msdState, error) {
	var st msdState
	if err := b.call(ctx, op, "GET", "/msd", nil, nil, &st); err != nil {
		return st, err
	}
	if !st.Enabled || !st.Online || st.Storage == nil || st.Drive == nil {
		return st, backends.WithHint(fmt.Errorf("pikvm: %s: the PiKVM's mass-storage drive is %s: %w", op,
			map[bool]string{true: "offline", false: "disabled"}[st.Enabled], backends.ErrUnsupported),
			"kvmd's msd plugin is off or found no drive (a PiKVM without OTG, or one set up without MSD): virtual media is unavailable on this bench")
	}
	return st, nil
}

func busyError(op string) error {
	return backends.WithHint(fmt.Errorf("pikvm: %s: the PiKVM's drive is busy with another operation: %w", op, backends.ErrBusy),
		"an upload or another media action is in progress on the PiKVM: retry when bench_media list shows the drive idle")
}

// MediaList lists the complete images in the PiKVM's storage (an upload
// that did not finish is left out) and what the drive presents.
func (b *Bench) MediaList(ctx context.Context) ([]backends.MediaImage, backends.MediaState, error) {
	st, err := b.msd(ctx, "list media")
	if err != nil {
		return nil, backends.MediaState{}, err
	}
	var images []backends.MediaImage
	for name, img := range st.Storage.Images {
		if img.Complete {
			images = append(images, backends.MediaImage{Name: name, Size: img.Size})
		}
	}
	sort.Slice(images, func(i, j int) bool { return images[i].Name < images[j].Name })
	return images, driveState(st), nil
}

func driveState(st msdState) backends.MediaState {
	ms := backends.MediaState{Connected: st.Drive.Connected, Mode: "flash"}
	if st.Drive.CDROM {
		ms.Mode = "cd"
	}
	if st.Drive.Image != nil {
		ms.Image = st.Drive.Image.Name
	}
	return ms
}

// MediaMount presents an image to the machine, following the drive's
// rule that nothing changes while it is connected: disconnect, download
// the URL into the storage (write_remote) or take the named image, select
// it as CD or flash, connect. Everything that can be checked is checked
// before the drive is touched. BootOnce is not served: a PiKVM cannot
// choose the machine's boot device (use the machine's boot menu).
func (b *Bench) MediaMount(ctx context.Context, m backends.MediaMount) error {
	const op = "mount media"
	cdrom := "1"
	switch m.Mode {
	case "", "cd":
	case "flash":
		cdrom = "0"
	default:
		return fmt.Errorf("pikvm: %s: mode %q: want cd or flash", op, m.Mode)
	}
	st, err := b.msd(ctx, op)
	if err != nil {
		return err
	}
	if st.Busy {
		return busyError(op)
	}
	name := m.Image
	if m.URL != "" {
		u, err := url.Parse(m.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("pikvm: %s: %q is not an http(s) URL the PiKVM can download", op, m.URL)
		}
		if name == "" {
			name, _ = url.PathUnescape(path.Base(u.Path))
		}
		if name == "" || name == "/" || name == "." {
			return backends.WithHint(fmt.Errorf("pikvm: %s: the URL %s names no file", op, u.Redacted()),
				"give the image a name for the PiKVM's storage (image=...)")
		}
		if _, taken := st.Storage.Images[name]; taken {
			return backends.WithHint(fmt.Errorf("pikvm: %s: an image named %q is already in the PiKVM's storage: %w", op, name, backends.ErrExists),
				fmt.Sprintf("mount it by name (image=%s, no URL), or download under another name", name))
		}
	} else {
		if name == "" {
			return fmt.Errorf("pikvm: %s: give an image name (bench_media list shows them) or a URL", op)
		}
		img, ok := st.Storage.Images[name]
		if !ok || !img.Complete {
			return backends.WithHint(fmt.Errorf("pikvm: %s: no image %q in the PiKVM's storage: %w", op, name, backends.ErrNotFound),
				"the images are: "+imageNames(st))
		}
	}

	// From here on a failure leaves the drive disconnected: say so.
	var was string
	if st.Drive.Connected {
		if err := b.setConnected(ctx, false); err != nil {
			return err
		}
		was = driveState(st).Image
	}
	changed := func(err error) error {
		if err == nil || was == "" {
			return err
		}
		return fmt.Errorf("%w (the drive, which presented %q, was disconnected for this and stays so)", err, was)
	}
	if m.URL != "" {
		if name, err = b.writeRemote(ctx, m.URL, name); err != nil {
			return changed(err)
		}
	}
	if err := b.call(ctx, "select the image", "POST", "/msd/set_params",
		url.Values{"image": {name}, "cdrom": {cdrom}, "rw": {"0"}}, nil, nil); err != nil {
		return changed(err)
	}
	return changed(b.setConnected(ctx, true))
}

func imageNames(st msdState) string {
	var names []string
	for n, img := range st.Storage.Images {
		if img.Complete {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "(none)"
	}
	if len(names) > 20 {
		names = append(names[:20], "…")
	}
	return strings.Join(names, ", ")
}

func (b *Bench) setConnected(ctx context.Context, on bool) error {
	op := "disconnect the drive"
	if on {
		op = "connect the drive"
	}
	v := "0"
	if on {
		v = "1"
	}
	return b.call(ctx, op, "POST", "/msd/set_connected", url.Values{"connected": {v}}, nil, nil)
}

// writeRemote has kvmd download rawURL into the storage as name. kvmd
// answers NDJSON progress lines under a 200; a failure after the first
// line comes as a last {"ok": false} line.
func (b *Bench) writeRemote(ctx context.Context, rawURL, name string) (string, error) {
	const op = "download the image"
	resp, err := b.request(ctx, op, "POST", "/msd/write_remote",
		url.Values{"url": {rawURL}, "image": {name}, "remove_incomplete": {"1"}}, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	type info struct {
		Image struct {
			Name    string `json:"name"`
			Size    int64  `json:"size"`
			Written int64  `json:"written"`
		} `json:"image"`
		Error    string `json:"error"`
		ErrorMsg string `json:"error_msg"`
	}
	var last info
	seen := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var ev struct {
			OK     bool `json:"ok"`
			Result info `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return "", b.wrapErr(op, fmt.Errorf("kvmd's progress line does not decode: %w", err))
		}
		if !ev.OK {
			return "", &APIError{Op: op, Status: 200, Class: ev.Result.Error, Message: b.scrub(ev.Result.ErrorMsg),
				hint: "the PiKVM could not download the image: check that the URL is reachable from the PiKVM itself (not only from here)"}
		}
		last, seen = ev.Result, true
	}
	if err := sc.Err(); err != nil {
		return "", b.wrapErr(op, err)
	}
	if !seen || last.Image.Written != last.Image.Size {
		return "", b.wrapErr(op, fmt.Errorf("the download ended after %d of %d bytes", last.Image.Written, last.Image.Size))
	}
	b.log.Info("pikvm: image downloaded", "api", b.base, "image", last.Image.Name, "size", last.Image.Size)
	return last.Image.Name, nil
}

// MediaEject disconnects the drive; an empty drive is fine (kvmd itself
// refuses to disconnect a disconnected drive).
func (b *Bench) MediaEject(ctx context.Context) error {
	st, err := b.msd(ctx, "eject media")
	if err != nil {
		return err
	}
	if !st.Drive.Connected {
		return nil
	}
	if st.Busy {
		return busyError("eject media")
	}
	return b.setConnected(ctx, false)
}

// MediaUpload copies an image of size bytes into the PiKVM's storage as
// name (POST /msd/write), disconnecting the drive first if it is connected.
func (b *Bench) MediaUpload(ctx context.Context, name string, r io.Reader, size int64) error {
	const op = "upload the image"
	st, err := b.msd(ctx, op)
	if err != nil {
		return err
	}
	if st.Busy {
		return busyError(op)
	}
	if _, taken := st.Storage.Images[name]; taken {
		return fmt.Errorf("pikvm: %s: an image named %q is already in the PiKVM's storage: %w", op, name, backends.ErrExists)
	}
	if st.Drive.Connected {
		if err := b.setConnected(ctx, false); err != nil {
			return err
		}
	}
	var out struct {
		Image struct {
			Size    int64 `json:"size"`
			Written int64 `json:"written"`
		} `json:"image"`
	}
	body := &sizedReader{r: io.LimitReader(r, size), size: size}
	if err := b.call(ctx, op, "POST", "/msd/write", url.Values{"image": {name}, "remove_incomplete": {"1"}}, body, &out); err != nil {
		return err
	}
	if out.Image.Written != size {
		return fmt.Errorf("pikvm: %s: the PiKVM stored %d of %d bytes", op, out.Image.Written, size)
	}
	return nil
}

// sizedReader carries its length so the request gets a Content-Length,
// which kvmd's /msd/write requires.
type sizedReader struct {
	r    io.Reader
	size int64
}

func (s *sizedReader) Read(p []byte) (int, error) { return s.r.Read(p) }
