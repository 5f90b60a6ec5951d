package redfishtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/backends/qga"
	"github.com/poligon/poligon/backends/qmp"
)

// VM is a QEMU machine for the fake to drive: the tiny template's kernel and
// initramfs (with qemu-ga), an IDE CD drive "cdrom0" with no medium, and
// several QMP sockets, because QEMU serves one client per socket and a test
// wants to look at the machine while a fake drives it. -no-shutdown keeps
// QEMU alive when the guest powers itself off, as a real machine's BMC stays
// up: the fake then reports Off and powers it on with system_reset + cont.
type VM struct {
	Dir  string
	QMP  []string // QMP sockets: one per fake, and one for the test
	QGA  string   // the guest agent's socket
	CDID string   // the CD drive's qdev id
	cmd  *exec.Cmd
	done chan struct{}
}

// cdModules are the kernel modules that give the tiny guest /dev/sr0 on
// QEMU's PIIX IDE controller (in dependency order: each .ko's depends=
// names only modules before it). The tiny template leaves them out.
var cdModules = []string{"scsi_common", "scsi_mod", "libata", "ata_piix", "cdrom", "sr_mod"}

// StartVM boots the tiny template with a CD drive. templates is the
// directory internal/testvm.TemplatesDir answers; dir holds the sockets and
// must be short (unix socket paths fit in 108 bytes). The VM is running
// when StartVM returns; WaitAgent waits for its guest agent.
func StartVM(templates, dir string, qmpSockets int) (*VM, error) {
	initrd, err := cdInitrd(templates)
	if err != nil {
		return nil, err
	}
	accel, err := qemu.ResolveAccel("", "auto")
	if err != nil {
		return nil, err
	}
	vm := &VM{Dir: dir, QGA: filepath.Join(dir, "qga"), CDID: "cdrom0", done: make(chan struct{})}
	args := []string{
		"-name", "redfishtest",
		"-machine", "pc", "-accel", accel.Mode,
		"-m", "128", "-smp", "1",
		"-nodefaults", "-no-user-config", "-vga", "std", "-display", "none",
		"-no-shutdown",
		"-kernel", filepath.Join(templates, "tiny", "vmlinuz"),
		"-initrd", initrd,
		"-append", "console=tty1 console=ttyS0 quiet",
		"-chardev", "socket,id=qga0,path=" + vm.QGA + ",server=on,wait=off",
		"-device", "virtio-serial-pci",
		"-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
		"-drive", "if=none,id=cd0,media=cdrom,readonly=on",
		"-device", "ide-cd,drive=cd0,id=" + vm.CDID + ",bus=ide.1",
		"-serial", "file:" + filepath.Join(dir, "serial.log"),
	}
	if accel.Mode == qemu.AccelKVM {
		args = append(args, "-cpu", "host")
	}
	for i := range qmpSockets {
		p := filepath.Join(dir, fmt.Sprintf("qmp%d", i))
		vm.QMP = append(vm.QMP, p)
		args = append(args, "-qmp", "unix:"+p+",server=on,wait=off")
	}
	var stderr bytes.Buffer
	vm.cmd = exec.Command("qemu-system-x86_64", args...)
	vm.cmd.Stderr = &stderr
	// QEMU must not outlive a test binary that dies.
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := vm.cmd.Start(); err != nil {
		return nil, fmt.Errorf("redfishtest: starting qemu: %w", err)
	}
	go func() { vm.cmd.Wait(); close(vm.done) }()
	// The monitor answers as soon as QEMU has set the machine up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := qmp.Dial(ctx, vm.QMP[len(vm.QMP)-1])
		cancel()
		if err == nil {
			c.Close()
			return vm, nil
		}
		select {
		case <-vm.done:
			return nil, fmt.Errorf("redfishtest: qemu exited: %s", strings.TrimSpace(stderr.String()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			vm.Stop()
			return nil, fmt.Errorf("redfishtest: qemu's monitor did not answer: %v", err)
		}
	}
}

// Stop ends QEMU and waits for it.
func (vm *VM) Stop() {
	if vm.cmd.Process != nil {
		vm.cmd.Process.Kill()
	}
	<-vm.done
}

// WaitAgent waits until the guest agent answers a ping, or ctx ends.
func (vm *VM) WaitAgent(ctx context.Context) error {
	for {
		err := vm.pingAgent(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redfishtest: the guest agent did not answer: %w", err)
		}
	}
}

// pingAgent pings once, giving the agent at most a second: one dial per
// attempt, so a reset guest's fresh agent is met on a clean channel.
func (vm *VM) pingAgent(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := qga.Dial(ctx, vm.QGA)
	if err != nil {
		<-ctx.Done() // the socket exists from the start: a dial error is rare
		return err
	}
	defer c.Close()
	return c.Ping(ctx)
}

// Exec runs a shell command in the guest and answers its stdout; a
// non-zero exit is an error carrying stderr.
func (vm *VM) Exec(ctx context.Context, script string) (string, error) {
	c, err := qga.Dial(ctx, vm.QGA)
	if err != nil {
		return "", err
	}
	defer c.Close()
	pid, err := c.Exec(ctx, qga.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, CaptureOutput: true})
	if err != nil {
		return "", err
	}
	for {
		st, err := c.ExecStatus(ctx, pid)
		if err != nil {
			return "", err
		}
		if st.Exited {
			if st.ExitCode != 0 {
				return string(st.Stdout), fmt.Errorf("guest: %q exited %d: %s", script, st.ExitCode, strings.TrimSpace(string(st.Stderr)))
			}
			return string(st.Stdout), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond): // qemu-ga has no exit notification
		}
	}
}

// cdInitrd answers the tiny initramfs with the CD modules appended as a
// second (gzip) cpio archive, which the kernel unpacks over the first: the
// .ko files and a load-order that lists them after the template's own. It
// is built once per template and kept beside the templates directory.
func cdInitrd(templates string) (string, error) {
	base := filepath.Join(templates, "tiny", "initrd.img")
	orig, err := os.ReadFile(base)
	if err != nil {
		return "", fmt.Errorf("redfishtest: %w", err)
	}
	sum := sha256.Sum256(orig)
	cache := filepath.Join(filepath.Dir(templates), "bmc-cdrom")
	out := filepath.Join(cache, "initrd-"+hex.EncodeToString(sum[:8])+".img")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	order, err := initrdFile(orig, "lib/modules/load-order")
	if err != nil {
		return "", err
	}
	deb, err := kernelDeb(templates)
	if err != nil {
		return "", err
	}
	mods, err := debModules(deb, cdModules)
	if err != nil {
		return "", err
	}
	var arch cpioWriter
	arch.dir("lib")
	arch.dir("lib/modules")
	newOrder := strings.TrimRight(string(order), "\n") + "\n"
	for _, m := range cdModules {
		arch.file("lib/modules/"+m+".ko", mods[m])
		newOrder += m + "\n"
	}
	arch.file("lib/modules/load-order", []byte(newOrder))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(arch.close())
	zw.Close()
	img := append([]byte{}, orig...)
	for len(img)%4 != 0 { // the kernel skips zero padding between archives
		img = append(img, 0)
	}
	img = append(img, gz.Bytes()...)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(cache, ".initrd-*")
	if err != nil {
		return "", err
	}
	if _, err := tmp.Write(img); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", err
	}
	tmp.Close()
	return out, os.Rename(tmp.Name(), out)
}

// initrdFile reads one file out of a gzip'd newc initramfs.
func initrdFile(img []byte, name string) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("redfishtest: the tiny initramfs: %w", err)
	}
	zr.Multistream(false)
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("redfishtest: the tiny initramfs: %w", err)
	}
	for len(data) >= 110 && string(data[:6]) == "070701" {
		var f [13]uint64
		for i := range f {
			fmt.Sscanf(string(data[6+8*i:14+8*i]), "%08x", &f[i])
		}
		size, nameSize := int(f[6]), int(f[11])
		nameEnd := 110 + nameSize
		if nameEnd > len(data) {
			break
		}
		n := strings.TrimPrefix(string(data[110:nameEnd-1]), "./")
		dataStart := align4(nameEnd)
		if dataStart+size > len(data) {
			break
		}
		if n == name {
			return data[dataStart : dataStart+size], nil
		}
		data = data[align4(dataStart+size):]
	}
	return nil, fmt.Errorf("redfishtest: %s not found in the tiny initramfs", name)
}

func align4(n int) int { return (n + 3) &^ 3 }

// kernelDeb finds the Debian kernel package the tiny template was built
// from: in its build cache, else fetched with apt-get download.
func kernelDeb(templates string) (string, error) {
	desc, err := os.ReadFile(filepath.Join(templates, "tiny.toml"))
	if err != nil {
		return "", fmt.Errorf("redfishtest: %w", err)
	}
	m := regexp.MustCompile(`from (linux-image-\S+) ([^,\s]+)`).FindSubmatch(desc)
	if m == nil {
		return "", errors.New("redfishtest: tiny.toml does not name its kernel package")
	}
	pkg, ver := string(m[1]), string(m[2])
	debs, _ := filepath.Glob(filepath.Join(filepath.Dir(templates), "cache", "tiny", "debs", pkg+"_*.deb"))
	if len(debs) > 0 {
		return debs[0], nil
	}
	dir, err := os.MkdirTemp("", "redfishtest-deb")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("apt-get", "download", pkg+"="+ver)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("redfishtest: apt-get download %s=%s: %v: %s", pkg, ver, err, out)
	}
	debs, _ = filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(debs) == 0 {
		return "", fmt.Errorf("redfishtest: apt-get download left no %s package", pkg)
	}
	return debs[0], nil
}

// debModules reads the named .ko files out of a kernel package.
func debModules(deb string, names []string) (map[string][]byte, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n+".ko"] = true
	}
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redfishtest: dpkg-deb: %w", err)
	}
	found := map[string][]byte{}
	tr := tar.NewReader(out)
	for len(found) < len(names) {
		h, err := tr.Next()
		if err != nil {
			break
		}
		base := filepath.Base(h.Name)
		if want[base] && strings.Contains(h.Name, "/kernel/") {
			data, err := io.ReadAll(tr)
			if err != nil {
				break
			}
			found[strings.TrimSuffix(base, ".ko")] = data
		}
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("redfishtest: dpkg-deb --fsys-tarfile %s: %v: %s", deb, err, stderr.String())
	}
	for _, n := range names {
		if found[n] == nil {
			return nil, fmt.Errorf("redfishtest: %s.ko is not in %s", n, deb)
		}
	}
	return found, nil
}

// cpioWriter writes a newc archive.
type cpioWriter struct {
	buf bytes.Buffer
	ino int
}

func (w *cpioWriter) entry(name string, mode uint32, data []byte) {
	w.ino++
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	fmt.Fprintf(&w.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	w.buf.WriteString(name)
	w.buf.WriteByte(0)
	w.pad()
	w.buf.Write(data)
	w.pad()
}

func (w *cpioWriter) pad() {
	for w.buf.Len()%4 != 0 {
		w.buf.WriteByte(0)
	}
}

func (w *cpioWriter) dir(name string)               { w.entry(name, 0o040755, nil) }
func (w *cpioWriter) file(name string, data []byte) { w.entry(name, 0o100644, data) }

func (w *cpioWriter) close() []byte {
	w.ino = -1 // the trailer's inode is 0
	w.entry("TRAILER!!!", 0, nil)
	return w.buf.Bytes()
}
