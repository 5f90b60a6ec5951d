package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/qmp"
)

// isoPrefix makes local ISO ids look like Proxmox volume ids.
const isoPrefix = "local:iso/"

// ISOs lists the images in the data directory's isos/ folder.
func (d *Driver) ISOs(ctx context.Context, storage string) ([]backends.ISO, error) {
	if storage != "" && storage != "local" {
		return nil, fmt.Errorf("storage %q: %w: the local backend has one storage, local (%s)", storage, backends.ErrNotFound, d.l.isos())
	}
	entries, err := os.ReadDir(d.l.isos())
	if err != nil {
		return nil, err
	}
	var out []backends.ISO
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(strings.ToLower(e.Name()), ".iso") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, backends.ISO{VolID: isoPrefix + e.Name(), Size: info.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolID < out[j].VolID })
	return out, nil
}

// isoPath resolves an ISO id (local:iso/x.iso, or just x.iso) to its file.
func (d *Driver) isoPath(volid string) (string, error) {
	name := strings.TrimPrefix(volid, isoPrefix)
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return "", fmt.Errorf("iso %q: want local:iso/<file>.iso as iso_list shows it", volid)
	}
	path := filepath.Join(d.l.isos(), name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("iso %q: %w in %s", volid, backends.ErrNotFound, d.l.isos())
	}
	return path, nil
}

// CreateFromISO makes a VM with empty disks that boots from an installer
// ISO (disks first, so an installed system boots once the CD is ejected).
func (d *Driver) CreateFromISO(ctx context.Context, req backends.ISORequest) (int, backends.Task, error) {
	if !vmName.MatchString(req.Name) {
		return 0, backends.Task{}, fmt.Errorf("vm name %q: use lowercase letters, digits and dashes (a DNS label, at most 63 characters)", req.Name)
	}
	iso, err := d.isoPath(req.ISO)
	if err != nil {
		return 0, backends.Task{}, err
	}
	if req.Storage != "" && req.Storage != "local" {
		return 0, backends.Task{}, fmt.Errorf("storage %q: %w: the local backend has one storage, local", req.Storage, backends.ErrNotFound)
	}
	if req.Disks < 1 || req.Disks > 8 || req.DiskGB < 1 || req.MemMB < 64 || req.Cores < 1 {
		return 0, backends.Task{}, fmt.Errorf("want 1-8 disks of at least 1 GB, at least 64 MB of memory and 1 core (got disks=%d disk_gb=%d mem_mb=%d cores=%d)", req.Disks, req.DiskGB, req.MemMB, req.Cores)
	}
	if req.UEFI {
		if _, err := os.Stat(d.opts.OVMFCode); err != nil {
			return 0, backends.Task{}, fmt.Errorf("uefi: %s missing: install Debian's ovmf package", d.opts.OVMFCode)
		}
	}
	vmid, dir, err := d.reserve(req.Name)
	if err != nil {
		return 0, backends.Task{}, err
	}
	c := vmConfig{
		VMID: vmid, Name: req.Name, Created: time.Now().UTC().Truncate(time.Second),
		MemoryMB: req.MemMB, Cores: req.Cores, Firmware: "bios", CDROM: iso, HasCD: true,
	}
	if req.UEFI {
		c.Firmware = "uefi"
	}
	if err := d.createISOFiles(ctx, &c, req); err != nil {
		os.RemoveAll(dir)
		return 0, backends.Task{}, err
	}
	return vmid, d.tasks.Start("qmcreate", vmid, func(context.Context) error { return nil }), nil
}

func (d *Driver) createISOFiles(ctx context.Context, c *vmConfig, req backends.ISORequest) error {
	dir := d.l.vmDir(c.VMID)
	for i := 0; i < req.Disks; i++ {
		dk := disk{Name: fmt.Sprintf("disk%d", i), File: fmt.Sprintf("disk%d.qcow2", i)}
		if err := d.qemuImg(ctx, "create", "-q", "-f", "qcow2", filepath.Join(dir, dk.File), strconv.Itoa(req.DiskGB)+"G"); err != nil {
			return err
		}
		c.Disks = append(c.Disks, dk)
	}
	if req.UEFI {
		if err := copyFile(d.opts.OVMFVars, filepath.Join(dir, "efivars.fd")); err != nil {
			return fmt.Errorf("uefi variables: %w", err)
		}
	}
	return c.write(d.l.vmConfig(c.VMID))
}

// Eject empties the CD drive, live when the VM runs.
func (d *Driver) Eject(ctx context.Context, vmid int) error {
	l := d.lock(vmid)
	l.Lock()
	defer l.Unlock()
	c, err := d.config(vmid)
	if err != nil {
		return err
	}
	if !c.HasCD {
		return fmt.Errorf("vmid %d has no CD drive", vmid)
	}
	if d.alive(vmid) && c.CDROM != "" {
		err := d.monitorDo(ctx, vmid, func(m *qmp.Client) error { return m.Eject(ctx, "cd0", true) })
		if err != nil {
			return fmt.Errorf("vmid %d eject: %w", vmid, err)
		}
	}
	c.CDROM = ""
	return c.write(d.l.vmConfig(vmid))
}

// ResizeDisk grows a disk to sizeGB; shrinking is refused.
func (d *Driver) ResizeDisk(ctx context.Context, vmid int, name string, sizeGB int) error {
	l := d.lock(vmid)
	l.Lock()
	defer l.Unlock()
	c, err := d.config(vmid)
	if err != nil {
		return err
	}
	node, ok := validDiskName(name)
	dk, found := c.disk(node)
	if !ok || !found {
		return fmt.Errorf("vmid %d has no disk %q (it has %s)", vmid, name, strings.Join(c.diskNames(), ", "))
	}
	path := c.diskPath(d.l.vmDir(vmid), dk)
	info, err := d.imageInfo(ctx, path)
	if err != nil {
		return err
	}
	size := int64(sizeGB) << 30
	if size < info.VirtualSize {
		return fmt.Errorf("disk %s is %s: shrinking to %d GiB is refused", node, humanBytes(info.VirtualSize), sizeGB)
	}
	if size == info.VirtualSize {
		return nil
	}
	if d.alive(vmid) {
		return d.monitorDo(ctx, vmid, func(m *qmp.Client) error { return m.BlockResize(ctx, dk.Name, size) })
	}
	return d.qemuImg(ctx, "resize", "-q", path, strconv.FormatInt(size, 10))
}

// AddDisks adds empty disks, hot-plugged when the VM runs.
func (d *Driver) AddDisks(ctx context.Context, vmid int, sizeGB, count int) ([]string, error) {
	if sizeGB < 1 || count < 1 || count > 8 {
		return nil, fmt.Errorf("want 1-8 disks of at least 1 GB (got count=%d size_gb=%d)", count, sizeGB)
	}
	l := d.lock(vmid)
	l.Lock()
	defer l.Unlock()
	c, err := d.config(vmid)
	if err != nil {
		return nil, err
	}
	if len(c.Disks)+count > 16 {
		return nil, fmt.Errorf("vmid %d has %d disks: at most 16", vmid, len(c.Disks))
	}
	dir := d.l.vmDir(vmid)
	running := d.alive(vmid)
	var added []string
	for i := 0; i < count; i++ {
		dk := disk{Name: c.nextDiskName()}
		dk.File = dk.Name + ".qcow2"
		path := filepath.Join(dir, dk.File)
		if err := d.qemuImg(ctx, "create", "-q", "-f", "qcow2", path, strconv.Itoa(sizeGB)+"G"); err != nil {
			return added, err
		}
		if running {
			if err := d.hotplugDisk(ctx, vmid, dk, path); err != nil {
				os.Remove(path)
				return added, err
			}
		}
		c.Disks = append(c.Disks, dk)
		if err := c.write(d.l.vmConfig(vmid)); err != nil {
			return added, err
		}
		added = append(added, dk.Name)
	}
	return added, nil
}

func (d *Driver) hotplugDisk(ctx context.Context, vmid int, dk disk, path string) error {
	return d.monitorDo(ctx, vmid, func(m *qmp.Client) error {
		err := m.Execute(ctx, "blockdev-add", map[string]any{
			"driver": "qcow2", "node-name": dk.Name,
			"file": map[string]any{"driver": "file", "filename": path},
		}, nil)
		if err != nil {
			return fmt.Errorf("hot-plug %s: %w", dk.Name, err)
		}
		err = m.Execute(ctx, "device_add", map[string]any{"driver": "virtio-blk-pci", "drive": dk.Name, "id": dk.Name + "-dev"}, nil)
		if err != nil {
			m.Execute(ctx, "blockdev-del", map[string]any{"node-name": dk.Name}, nil)
			return fmt.Errorf("hot-plug %s: %w", dk.Name, err)
		}
		return nil
	})
}
