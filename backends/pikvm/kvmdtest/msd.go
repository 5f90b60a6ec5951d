package kvmdtest

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// msd is kvmd's OTG mass-storage drive: images in a storage directory, a
// drive that presents one of them as a CD or a flash disk, and the rules
// of plugins/msd/otg: while the drive is connected nothing else may change
// (MsdConnectedError), one operation at a time (MsdIsBusyError, also for the
// whole of an upload). Connecting puts the image into the machine: the IDE
// CD's tray in CD mode, a hot-plugged usb-storage disk in flash mode.
type msd struct {
	s *Server

	mu         sync.Mutex
	busy       bool
	image      string // the selected image, "" for none
	connected  bool
	cdrom      bool
	rw         bool
	flash      bool            // the usb-storage device is attached
	incomplete map[string]bool // images whose upload did not finish
	progress   map[string]any  // the upload in progress: {name, size, written}
	downloadOp string          // "uploading" or "downloading" (kvmd reports write_remote as uploading too)
}

func newMSD(s *Server) *msd {
	return &msd{s: s, cdrom: true, incomplete: map[string]bool{}}
}

func (m *msd) close() {}

var (
	errMsdBusy         = fail(409, "MsdIsBusyError", "Performing another MSD operation, please try again later")
	errMsdConnected    = fail(400, "MsdConnectedError", "MSD is connected to Server, but shouldn't for this operation")
	errMsdDisconnected = fail(400, "MsdDisconnectedError", "MSD is disconnected from Server, but should be for this operation")
	errMsdNotSelected  = fail(400, "MsdImageNotSelected", "The image is not selected")
	errMsdUnknownImage = fail(400, "MsdUnknownImageError", "The image is not found in the storage")
	errMsdImageExists  = fail(400, "MsdImageExistsError", "This image is already exists")
	errMsdRemote       = fail(400, "MsdRemoteDisabledError", "Remote images binding is disabled")
)

// enter takes the busy region; leave with exit.
func (m *msd) enter() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy {
		return errMsdBusy
	}
	m.busy = true
	return nil
}

func (m *msd) exit() {
	m.mu.Lock()
	m.busy = false
	m.mu.Unlock()
}

// disconnected is check_online_disconnected. m.mu is held.
func (m *msd) disconnected() error {
	if m.connected {
		return errMsdConnected
	}
	return nil
}

type imageInfo struct {
	size  int64
	modTS float64
}

func (m *msd) images() map[string]imageInfo {
	out := map[string]imageInfo{}
	filepath.WalkDir(m.s.imagesDir(), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(m.s.imagesDir(), p)
		out[filepath.ToSlash(rel)] = imageInfo{size: info.Size(), modTS: float64(info.ModTime().UnixMicro()) / 1e6}
		return nil
	})
	return out
}

func (m *msd) state(http.ResponseWriter, *http.Request) (any, error) {
	imgs := m.images()
	m.mu.Lock()
	defer m.mu.Unlock()
	images := map[string]any{}
	for name, info := range imgs {
		images[name] = map[string]any{"complete": !m.incomplete[name], "removable": true, "writable": true, "size": info.size, "mod_ts": info.modTS}
	}
	var drive any
	var selected any
	if m.image != "" {
		if info, ok := imgs[m.image]; ok {
			selected = map[string]any{"name": m.image, "in_storage": true, "complete": !m.incomplete[m.image],
				"removable": true, "writable": true, "size": info.size, "mod_ts": info.modTS}
		}
	}
	drive = map[string]any{"image": selected, "connected": m.connected, "cdrom": m.cdrom, "rw": m.rw}
	storage := map[string]any{
		"images":      images,
		"parts":       map[string]any{"": map[string]any{"size": int64(64) << 30, "free": int64(60) << 30, "writable": true}},
		"downloading": nil,
		"uploading":   nil,
	}
	if m.progress != nil {
		storage[m.downloadOp] = m.progress
	}
	return map[string]any{"enabled": true, "online": true, "busy": m.busy, "storage": storage, "drive": drive}, nil
}

var (
	remoteLike   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9._+-]+[a-zA-Z]://[a-zA-Z0-9\[]`)
	printableBad = regexp.MustCompile(`[\x00-\x1f\x7f]`)
)

// validImageName is valid_msd_image_name: slash-separated printable file
// names; "" only where allowEject.
func validImageName(arg string, allowEject bool) (string, error) {
	arg = strings.TrimSpace(arg)
	if arg == "" && allowEject {
		return "", nil
	}
	var parts []string
	for _, p := range strings.Split(arg, "/") {
		if p == "" {
			continue
		}
		if p == "." || p == ".." || printableBad.MatchString(p) || len(p) > 255 {
			return "", validatorError(arg, "MSD image name")
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "", validatorError(arg, "MSD image name")
	}
	return strings.Join(parts, "/"), nil
}

func (m *msd) setParams(_ http.ResponseWriter, r *http.Request) (any, error) {
	var name *string
	if v := queryString(r, "image"); v != nil {
		if remoteLike.MatchString(*v) {
			return nil, errMsdRemote
		}
		n, err := validImageName(*v, true)
		if err != nil {
			return nil, err
		}
		name = &n
	}
	var cdrom, rw *bool
	for _, p := range []struct {
		name string
		dst  **bool
	}{{"cdrom", &cdrom}, {"rw", &rw}} {
		if r.URL.Query().Has(p.name) {
			v, err := queryBool(r, p.name, false)
			if err != nil {
				return nil, err
			}
			*p.dst = &v
		}
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.exit()
	imgs := m.images()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.disconnected(); err != nil {
		return nil, err
	}
	if name != nil {
		if *name != "" {
			if _, ok := imgs[*name]; !ok {
				return nil, errMsdUnknownImage
			}
		}
		m.image = *name
	}
	if cdrom != nil {
		m.cdrom = *cdrom
	}
	if rw != nil {
		m.rw = *rw
	}
	if m.rw && m.cdrom {
		m.rw = false
	}
	return nil, nil
}

func (m *msd) setConnected(_ http.ResponseWriter, r *http.Request) (any, error) {
	if !r.URL.Query().Has("connected") {
		return nil, fail(400, "ValidatorError", "None argument is not a valid bool (['1', 'true', 'yes'] or ['0', 'false', 'no'])")
	}
	connected, err := queryBool(r, "connected", false)
	if err != nil {
		return nil, err
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.exit()
	imgs := m.images()
	m.mu.Lock()
	image, cdrom, rw, isConnected := m.image, m.cdrom, m.rw, m.connected
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if connected {
		if isConnected {
			return nil, errMsdConnected
		}
		if image == "" {
			return nil, errMsdNotSelected
		}
		if _, ok := imgs[image]; !ok {
			return nil, errMsdUnknownImage
		}
		if err := m.insert(ctx, filepath.Join(m.s.imagesDir(), filepath.FromSlash(image)), cdrom, rw); err != nil {
			return nil, fail(400, "MsdError", "Can't connect the image: %v", err)
		}
	} else {
		if !isConnected {
			return nil, errMsdDisconnected
		}
		if err := m.takeOut(ctx); err != nil {
			return nil, fail(400, "MsdError", "Can't disconnect the image: %v", err)
		}
	}
	m.mu.Lock()
	m.connected = connected
	m.mu.Unlock()
	return nil, nil
}

// insert puts the image into the machine.
func (m *msd) insert(ctx context.Context, file string, cdrom, rw bool) error {
	vm := m.s.vm
	if cdrom {
		return vm.Execute(ctx, "blockdev-change-medium", map[string]any{
			"id": cdDevice, "filename": file, "format": "raw", "read-only-mode": "read-only"}, nil)
	}
	if err := vm.Execute(ctx, "blockdev-add", map[string]any{
		"driver": "raw", "node-name": flashNode, "read-only": !rw,
		"file": map[string]any{"driver": "file", "filename": file, "read-only": !rw}}, nil); err != nil {
		return err
	}
	if err := vm.Execute(ctx, "device_add", map[string]any{
		"driver": "usb-storage", "id": flashDev, "drive": flashNode, "bus": usbBus, "removable": true}, nil); err != nil {
		vm.Execute(ctx, "blockdev-del", map[string]any{"node-name": flashNode}, nil)
		return err
	}
	m.mu.Lock()
	m.flash = true
	m.mu.Unlock()
	return nil
}

// takeOut takes the image out of the machine.
func (m *msd) takeOut(ctx context.Context) error {
	vm := m.s.vm
	m.mu.Lock()
	flash := m.flash
	m.mu.Unlock()
	if !flash {
		return vm.Execute(ctx, "eject", map[string]any{"id": cdDevice, "force": true}, nil)
	}
	since := time.Now()
	if err := vm.Execute(ctx, "device_del", map[string]any{"id": flashDev}, nil); err != nil {
		return err
	}
	c, err := vm.QMP(ctx)
	if err != nil {
		return err
	}
	if _, err := c.WaitEvent(ctx, "DEVICE_DELETED", since.Add(-time.Second)); err != nil {
		return err
	}
	m.mu.Lock()
	m.flash = false
	m.mu.Unlock()
	return vm.Execute(ctx, "blockdev-del", map[string]any{"node-name": flashNode}, nil)
}

// makeImage creates the file an upload writes: MsdImageExistsError when
// the name is taken. The busy region is held.
func (m *msd) makeImage(name string) (*os.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.disconnected(); err != nil {
		return nil, err
	}
	p := filepath.Join(m.s.imagesDir(), filepath.FromSlash(name))
	if _, err := os.Stat(p); err == nil {
		return nil, errMsdImageExists
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	m.incomplete[name] = true
	return f, nil
}

// finish marks an upload complete (or removes it when asked to).
func (m *msd) finish(name string, f *os.File, complete, removeIncomplete bool) {
	f.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.progress = nil
	if complete {
		delete(m.incomplete, name)
	} else if removeIncomplete {
		delete(m.incomplete, name)
		os.Remove(f.Name())
	}
}

func writeInfo(name string, size, written int64) map[string]any {
	return map[string]any{"image": map[string]any{"name": name, "size": size, "written": written}}
}

// write is /msd/write: the body is the image, Content-Length required.
func (m *msd) write(_ http.ResponseWriter, r *http.Request) (any, error) {
	prefix := r.URL.Query().Get("prefix")
	name, err := validImageName(prefix+"/"+r.URL.Query().Get("image"), false)
	if err != nil {
		return nil, err
	}
	if r.ContentLength < 0 {
		return nil, validatorError(nil, "int")
	}
	removeIncomplete, err := queryBool(r, "remove_incomplete", false)
	if err != nil {
		return nil, err
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.exit()
	f, err := m.makeImage(name)
	if err != nil {
		return nil, err
	}
	size := r.ContentLength
	m.setProgress("uploading", name, size, 0)
	written, _ := io.Copy(progressWriter{m, f, name, size}, r.Body)
	m.finish(name, f, written == size, removeIncomplete)
	return writeInfo(name, size, written), nil
}

type progressWriter struct {
	m    *msd
	f    *os.File
	name string
	size int64
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.m.mu.Lock()
	if p.m.progress != nil {
		if img, ok := p.m.progress["image"].(map[string]any); ok {
			img["written"] = img["written"].(int64) + int64(n)
		}
	}
	p.m.mu.Unlock()
	return n, err
}

func (m *msd) setProgress(op, name string, size, written int64) {
	m.mu.Lock()
	m.progress, m.downloadOp = writeInfo(name, size, written), op
	m.mu.Unlock()
}

var validURL = regexp.MustCompile(`^(http|https)://[^\s/?#]+([/?#]\S*)?$`)

// writeRemote is /msd/write_remote: kvmd downloads the URL into the
// storage and streams NDJSON progress under a 200; a failure before the
// stream starts is an ordinary error answer, one after it is a last
// {"ok": false} line.
func (m *msd) writeRemote(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	rawURL := strings.TrimSpace(q.Get("url"))
	if !q.Has("url") {
		return nil, validatorError(nil, "URL")
	}
	if !validURL.MatchString(rawURL) {
		return nil, validatorError(rawURL, "URL")
	}
	insecure, err := queryBool(r, "insecure", false)
	if err != nil {
		return nil, err
	}
	timeout := 10.0
	if v := queryString(r, "timeout"); v != nil {
		t, err := strconv.ParseFloat(*v, 64)
		if err != nil {
			return nil, validatorError(*v, "float")
		}
		if t < 0.1 {
			return nil, fail(400, "ValidatorError", "The argument '%v' must be float and greater or equial than 0.1", *v)
		}
		timeout = t
	}
	removeIncomplete, err := queryBool(r, "remove_incomplete", false)
	if err != nil {
		return nil, err
	}

	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:       &tls.Config{InsecureSkipVerify: insecure},
		ResponseHeaderTimeout: time.Duration(timeout * float64(time.Second)),
	}}
	req, err := http.NewRequestWithContext(r.Context(), "GET", rawURL, nil)
	if err != nil {
		return nil, validatorError(rawURL, "URL")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fail(400, "ClientConnectorError", "Cannot connect to host %s: %v", req.URL.Host, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fail(400, "ClientResponseError", "%d, message='%s', url='%s'", resp.StatusCode, http.StatusText(resp.StatusCode), rawURL)
	}
	fileName := path.Base(req.URL.Path)
	if u, err := url.PathUnescape(fileName); err == nil {
		fileName = u
	}
	if v := q.Get("image"); v != "" {
		fileName = v
	}
	name, err := validImageName(q.Get("prefix")+"/"+fileName, false)
	if err != nil {
		return nil, err
	}
	size := resp.ContentLength
	if size < 0 {
		return nil, fail(400, "ClientPayloadError", "The remote server did not tell the image size (no Content-Length)")
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.exit()
	f, err := m.makeImage(name)
	if err != nil {
		return nil, err
	}
	m.setProgress("uploading", name, size, 0)

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	flusher, _ := w.(http.Flusher)
	line := func(ok bool, result any) {
		b, _ := json.Marshal(map[string]any{"ok": ok, "result": result})
		w.Write(append(b, '\r', '\n'))
		if flusher != nil {
			flusher.Flush()
		}
	}
	line(true, writeInfo(name, size, 0))
	var written int64
	last := time.Now()
	buf := make([]byte, 64<<10)
	var copyErr error
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := (progressWriter{m, f, name, size}).Write(buf[:n]); werr != nil {
				copyErr = werr
				break
			}
			written += int64(n)
			if time.Since(last) > time.Second {
				line(true, writeInfo(name, size, written))
				last = time.Now()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			copyErr = err
			break
		}
	}
	if copyErr == nil && written != size {
		copyErr = fmt.Errorf("Response payload is not completed: %d of %d bytes", written, size)
	}
	m.finish(name, f, copyErr == nil, removeIncomplete)
	line(true, writeInfo(name, size, written))
	if copyErr != nil {
		line(false, map[string]any{"error": "ClientPayloadError", "error_msg": copyErr.Error()})
	}
	return raw, nil
}

func (m *msd) remove(_ http.ResponseWriter, r *http.Request) (any, error) {
	name, err := validImageName(r.URL.Query().Get("image"), false)
	if err != nil {
		return nil, err
	}
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.exit()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.disconnected(); err != nil {
		return nil, err
	}
	p := filepath.Join(m.s.imagesDir(), filepath.FromSlash(name))
	if _, err := os.Stat(p); err != nil {
		return nil, errMsdUnknownImage
	}
	if m.image == name {
		m.image = ""
	}
	delete(m.incomplete, name)
	return nil, os.Remove(p)
}

// AddImage puts an image into the MSD storage, as an upload would.
func (s *Server) AddImage(name string, data []byte) error {
	p := filepath.Join(s.imagesDir(), filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// Images lists the storage's image names.
func (s *Server) Images() []string {
	var names []string
	for n := range s.msd.images() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
