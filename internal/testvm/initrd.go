package testvm

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// TinyWithModules answers the tiny template's initrd (in templates, the
// directory TemplatesDir answers) with modules and their dependencies
// layered on, cached under the data directory's name/: for the physical
// benches' fakes, whose machines need drivers tiny leaves out (a CD, USB).
func TinyWithModules(templates, name string, modules []string) (string, error) {
	data := filepath.Dir(templates)
	return LayeredInitrd(filepath.Join(templates, "tiny", "initrd.img"),
		filepath.Join(data, "cache", "tiny", "debs"), filepath.Join(data, name), modules)
}

// LayeredInitrd answers an initrd that is base (the tiny template's gzip'd
// cpio) followed by a second, uncompressed cpio holding modules and a
// load-order that lists them after base's own: the kernel unpacks both, and
// tiny's /init loads everything load-order names. The modules come from the
// Debian kernel package in debsDir whose release matches base's modules.
// The result is cached in cacheDir (keyed by base and the module list).
func LayeredInitrd(base, debsDir, cacheDir string, modules []string) (string, error) {
	raw, err := os.ReadFile(base)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(raw, []byte(strings.Join(modules, ","))...))
	out := filepath.Join(cacheDir, "initrd-"+hex.EncodeToString(sum[:8])+".img")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	// Parallel test processes build it once: the second waits and finds it.
	lock, err := os.OpenFile(filepath.Join(cacheDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}

	files, err := readCpio(raw)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", base, err)
	}
	order := strings.Fields(string(files["lib/modules/load-order"]))
	if len(order) == 0 {
		return "", fmt.Errorf("%s has no lib/modules/load-order: not a tiny template initrd?", base)
	}
	release := ""
	for _, m := range order {
		if release = modinfo(files["lib/modules/"+m+".ko"], "vermagic"); release != "" {
			release, _, _ = strings.Cut(release, " ")
			break
		}
	}
	if release == "" {
		return "", fmt.Errorf("%s: no module names its kernel release (vermagic)", base)
	}
	deb, err := kernelDeb(debsDir, release)
	if err != nil {
		return "", err
	}
	have := map[string]bool{}
	for _, m := range order {
		have[m] = true
	}
	mods, added, err := extractModules(deb, release, modules, have)
	if err != nil {
		return "", err
	}

	var layer bytes.Buffer
	cw := &cpioWriter{w: &layer}
	for _, m := range added {
		cw.file("lib/modules/"+m+".ko", mods[m])
	}
	cw.file("lib/modules/load-order", []byte(strings.Join(append(order, added...), "\n")+"\n"))
	cw.trailer()

	// The kernel looks for a following archive at a 4-byte boundary,
	// skipping the zeros before it.
	combined := append(raw, make([]byte, (4-len(raw)%4)%4)...)
	combined = append(combined, layer.Bytes()...)
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, combined, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	// Layers of earlier templates are no use any more.
	old, _ := filepath.Glob(filepath.Join(cacheDir, "initrd-*.img"))
	for _, f := range old {
		if f != out {
			os.Remove(f)
		}
	}
	return out, nil
}

// kernelDeb finds the linux-image package of release in dir (the newest
// version when several are cached).
func kernelDeb(dir, release string) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(dir, "linux-image-"+release+"_*.deb"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no linux-image-%s_*.deb in %s (images/tiny/build.sh downloads it)", release, dir)
	}
	sort.Strings(matches)
	return matches[len(matches)-1], nil
}

// extractModules reads wanted and their dependencies (less those in have)
// from the kernel package and answers their bytes and the names in load
// order. Two passes over the package: one to learn every module's
// dependencies, one to copy those needed.
func extractModules(deb, release string, wanted []string, have map[string]bool) (map[string][]byte, []string, error) {
	prefix := "./lib/modules/" + release + "/kernel/"
	deps := map[string][]string{}
	err := walkDeb(deb, func(name string, r io.Reader) error {
		m, ok := moduleName(name, prefix)
		if !ok {
			return nil
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		deps[m] = nil
		for _, d := range strings.Split(modinfo(data, "depends"), ",") {
			if d != "" {
				deps[m] = append(deps[m], strings.ReplaceAll(d, "-", "_"))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(m string) error
	visit = func(m string) error {
		if have[m] || state[m] == 2 {
			return nil
		}
		if state[m] == 1 {
			return fmt.Errorf("module dependency cycle through %s", m)
		}
		d, ok := deps[m]
		if !ok {
			return fmt.Errorf("module %s is not in %s", m, filepath.Base(deb))
		}
		state[m] = 1
		for _, dep := range d {
			if err := visit(dep); err != nil {
				return err
			}
		}
		state[m] = 2
		order = append(order, m)
		return nil
	}
	for _, m := range wanted {
		if err := visit(m); err != nil {
			return nil, nil, err
		}
	}
	need := map[string]bool{}
	for _, m := range order {
		need[m] = true
	}
	mods := map[string][]byte{}
	err = walkDeb(deb, func(name string, r io.Reader) error {
		m, ok := moduleName(name, prefix)
		if !ok || !need[m] {
			return nil
		}
		data, err := io.ReadAll(r)
		mods[m] = data
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	for _, m := range order {
		if mods[m] == nil {
			return nil, nil, fmt.Errorf("module %s vanished from %s", m, filepath.Base(deb))
		}
	}
	return mods, order, nil
}

func moduleName(name, prefix string) (string, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".ko") {
		return "", false // compressed modules (.ko.xz) are not used by Debian 12's kernel
	}
	return strings.ReplaceAll(strings.TrimSuffix(path.Base(name), ".ko"), "-", "_"), true
}

// walkDeb calls fn for every regular file of a .deb's data archive.
func walkDeb(deb string, fn func(name string, r io.Reader) error) error {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	tr := tar.NewReader(bufio.NewReaderSize(stdout, 1<<20))
	var walkErr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			walkErr = err
			break
		}
		if h.Typeflag == tar.TypeReg {
			if walkErr = fn(h.Name, tr); walkErr != nil {
				break
			}
		}
	}
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil && walkErr == nil {
		walkErr = fmt.Errorf("dpkg-deb --fsys-tarfile %s: %v: %s", deb, err, strings.TrimSpace(stderr.String()))
	}
	return walkErr
}

// modinfo answers the value of key in a module's NUL-separated .modinfo
// strings ("depends", "vermagic").
func modinfo(ko []byte, key string) string {
	needle := []byte("\x00" + key + "=")
	i := bytes.Index(ko, needle)
	if i < 0 {
		return ""
	}
	rest := ko[i+len(needle):]
	if j := bytes.IndexByte(rest, 0); j >= 0 {
		rest = rest[:j]
	}
	return string(rest)
}

// readCpio reads the regular files of a gzip'd (or plain) newc cpio archive.
func readCpio(raw []byte) (map[string][]byte, error) {
	var r io.Reader = bytes.NewReader(raw)
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		zr.Multistream(false) // only the first archive
		data, err := io.ReadAll(zr)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(data)
	}
	br := bufio.NewReader(r)
	files := map[string][]byte{}
	for {
		var hdr [110]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return nil, fmt.Errorf("cpio header: %w", err)
		}
		if string(hdr[:6]) != "070701" && string(hdr[:6]) != "070702" {
			return nil, errors.New("not a newc cpio archive")
		}
		field := func(i int) int {
			n, _ := strconv.ParseUint(string(hdr[6+8*i:14+8*i]), 16, 32)
			return int(n)
		}
		mode, size, nameSize := field(1), field(6), field(11)
		name := make([]byte, nameSize)
		if _, err := io.ReadFull(br, name); err != nil {
			return nil, err
		}
		if _, err := br.Discard((4 - (110+nameSize)%4) % 4); err != nil {
			return nil, err
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, err
		}
		if _, err := br.Discard((4 - size%4) % 4); err != nil && size > 0 {
			return nil, err
		}
		n := strings.TrimSuffix(string(name), "\x00")
		if n == "TRAILER!!!" {
			return files, nil
		}
		if mode&0o170000 == 0o100000 {
			files[strings.TrimPrefix(n, "./")] = data
		}
	}
}

// cpioWriter writes a newc cpio archive.
type cpioWriter struct {
	w   *bytes.Buffer
	ino int
}

func (c *cpioWriter) entry(name string, mode int, data []byte) {
	c.ino++
	fmt.Fprintf(c.w, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.w.WriteString(name)
	c.w.WriteByte(0)
	c.pad()
	c.w.Write(data)
	c.pad()
}

func (c *cpioWriter) pad() {
	for c.w.Len()%4 != 0 {
		c.w.WriteByte(0)
	}
}

func (c *cpioWriter) file(name string, data []byte) { c.entry(name, 0o100644, data) }
func (c *cpioWriter) trailer()                      { c.entry("TRAILER!!!", 0, nil) }
