package pve

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/poligon/poligon/backends"
)

// maxSCSI is the number of scsiN slots a PVE VM has (scsi0..scsi30).
const maxSCSI = 31

// Defaults of CreateFromISO for zero fields.
const (
	defaultDiskGB = 32
	defaultMemMB  = 4096
	defaultCores  = 2
)

// onlineNodes answers the cluster's online nodes, sorted.
func (b *Backend) onlineNodes(ctx context.Context) ([]string, error) {
	var nodes []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	if err := b.get(ctx, "list nodes", "/nodes", nil, &nodes); err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes {
		if n.Status == "" || n.Status == "online" {
			out = append(out, n.Node)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("pve: no node of the cluster is online")
	}
	sort.Strings(out)
	return out, nil
}

func (b *Backend) isoContent(ctx context.Context, node, storage string) ([]backends.ISO, error) {
	var list []struct {
		VolID string  `json:"volid"`
		Size  flexInt `json:"size"`
	}
	path := fmt.Sprintf("/nodes/%s/storage/%s/content", url.PathEscape(node), url.PathEscape(storage))
	if err := b.get(ctx, "list the ISOs of storage "+storage, path, url.Values{"content": {"iso"}}, &list); err != nil {
		return nil, err
	}
	out := make([]backends.ISO, 0, len(list))
	for _, it := range list {
		out = append(out, backends.ISO{VolID: it.VolID, Size: int64(it.Size)})
	}
	return out, nil
}

// ISOs lists the installer ISOs of storage as the first online node sees
// it; with no storage, of every storage that holds ISOs.
func (b *Backend) ISOs(ctx context.Context, storage string) ([]backends.ISO, error) {
	nodes, err := b.onlineNodes(ctx)
	if err != nil {
		return nil, err
	}
	node := nodes[0]
	storages := []string{storage}
	if storage == "" {
		var list []struct {
			Storage string `json:"storage"`
		}
		if err := b.get(ctx, "list ISO storages", "/nodes/"+url.PathEscape(node)+"/storage",
			url.Values{"content": {"iso"}}, &list); err != nil {
			return nil, err
		}
		storages = storages[:0]
		for _, s := range list {
			storages = append(storages, s.Storage)
		}
	}
	var out []backends.ISO
	for _, st := range storages {
		isos, err := b.isoContent(ctx, node, st)
		if err != nil {
			return nil, err
		}
		out = append(out, isos...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolID < out[j].VolID })
	return out, nil
}

// isoNode answers the first online node whose storage holds the ISO (a
// local storage differs from node to node).
func (b *Backend) isoNode(ctx context.Context, volid string) (string, error) {
	storage, _, ok := strings.Cut(volid, ":")
	if !ok || storage == "" {
		return "", fmt.Errorf("pve: ISO %q: want a volume id like local:iso/NAME.iso", volid)
	}
	nodes, err := b.onlineNodes(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		isos, err := b.isoContent(ctx, n, storage)
		if err != nil {
			continue
		}
		for _, iso := range isos {
			if iso.VolID == volid {
				return n, nil
			}
		}
	}
	return "", fmt.Errorf("pve: ISO %s: %w on any online node", volid, backends.ErrNotFound)
}

// CreateFromISO creates a VM that boots an installer: scsi0..N-1 disks on
// virtio-scsi-single, the ISO on ide2, virtio net on vmbr0, the agent
// enabled, boot order scsi0 then ide2 (so it boots the disk once the
// installer wrote it), and OVMF with an EFI disk when UEFI.
func (b *Backend) CreateFromISO(ctx context.Context, req backends.ISORequest) (int, backends.Task, error) {
	if req.Name == "" {
		return 0, backends.Task{}, errors.New("pve: a new VM needs a name")
	}
	storage := req.Storage
	if storage == "" {
		storage = b.storage
	}
	if storage == "" {
		return 0, backends.Task{}, errors.New("pve: no storage for the new VM's disks: name one, or configure the backend's default storage")
	}
	disks, gb, mem, cores := req.Disks, req.DiskGB, req.MemMB, req.Cores
	if disks == 0 {
		disks = 1
	}
	if gb == 0 {
		gb = defaultDiskGB
	}
	if mem == 0 {
		mem = defaultMemMB
	}
	if cores == 0 {
		cores = defaultCores
	}
	if disks < 1 || disks > maxSCSI || gb < 1 || mem < 16 || cores < 1 {
		return 0, backends.Task{}, fmt.Errorf("pve: create %q: want 1..%d disks of at least 1 GB, memory >= 16 MB and cores >= 1", req.Name, maxSCSI)
	}
	if err := b.checkName(ctx, req.Name); err != nil {
		return 0, backends.Task{}, err
	}
	node, err := b.isoNode(ctx, req.ISO)
	if err != nil {
		return 0, backends.Task{}, err
	}
	body := map[string]any{
		"name": req.Name, "memory": mem, "cores": cores, "scsihw": "virtio-scsi-single",
		"net0": "virtio,bridge=vmbr0", "agent": "enabled=1", "boot": "order=scsi0;ide2",
		"ide2": req.ISO + ",media=cdrom",
	}
	for i := range disks {
		body[fmt.Sprintf("scsi%d", i)] = fmt.Sprintf("%s:%d", storage, gb)
	}
	if req.UEFI {
		body["bios"] = "ovmf"
		body["efidisk0"] = storage + ":1,efitype=4m"
	}
	if req.Pool != "" {
		body["pool"] = req.Pool
	}
	vmid, upid, err := b.createWithNextID(ctx, func(id int) (string, error) {
		body["vmid"] = id
		var upid string
		err := b.post(ctx, "create VM "+req.Name, "/nodes/"+url.PathEscape(node)+"/qemu", body, &upid)
		return upid, err
	})
	if err != nil {
		return 0, backends.Task{}, err
	}
	b.tok.remember(createdVM{vmid: vmid, name: req.Name, node: node, pool: req.Pool, upid: upid})
	b.cl.learnNode(vmid, node)
	b.cl.invalidate()
	b.tok.memo(upid, taskMemo{vmid: vmid})
	b.log.InfoContext(ctx, "pve: creating from ISO", "vmid", vmid, "name", req.Name, "iso", req.ISO, "node", node, "upid", upid)
	return vmid, backends.Task{ID: upid, VMID: vmid}, nil
}

// Eject empties the CD drive (ide2=none,media=cdrom).
func (b *Backend) Eject(ctx context.Context, vmid int) error {
	err := b.withVM(ctx, vmid, func(node string) error {
		return b.put(ctx, fmt.Sprintf("eject the CD of vmid %d", vmid), vmPath(node, vmid)+"/config",
			map[string]any{"ide2": "none,media=cdrom"}, nil)
	})
	if err == nil {
		b.cl.invalidate()
	}
	return err
}

var diskNamePattern = regexp.MustCompile(`^(scsi|virtio|sata|ide)(\d+)$`)

// DiskName maps a disk name to PVE's: "scsi0" as it is, and the local
// backend's "disk0" to "scsi0".
func DiskName(name string) (string, error) {
	if n, ok := strings.CutPrefix(name, "disk"); ok {
		if _, err := strconv.Atoi(n); err == nil {
			return "scsi" + n, nil
		}
	}
	if diskNamePattern.MatchString(name) {
		return name, nil
	}
	return "", fmt.Errorf("pve: disk %q: want scsiN (or diskN)", name)
}

// diskGB reads size=... of a disk value in GiB.
func diskGB(value string) float64 {
	for _, part := range strings.Split(value, ",") {
		sz, ok := strings.CutPrefix(part, "size=")
		if !ok || sz == "" {
			continue
		}
		unit := map[byte]float64{'K': 1.0 / (1 << 20), 'M': 1.0 / 1024, 'G': 1, 'T': 1024}
		m, known := unit[sz[len(sz)-1]]
		if known {
			sz = sz[:len(sz)-1]
		} else {
			m = 1.0 / (1 << 30)
		}
		if n, err := strconv.ParseFloat(sz, 64); err == nil {
			return n * m
		}
	}
	return 0
}

// ResizeDisk grows a disk to sizeGB; disks never shrink. It waits for
// PVE's resize task (qemu-server >= 8.0.2; older ones answer at once).
func (b *Backend) ResizeDisk(ctx context.Context, vmid int, disk string, sizeGB int) error {
	name, err := DiskName(disk)
	if err != nil {
		return err
	}
	return b.withVM(ctx, vmid, func(node string) error {
		cfg, err := b.config(ctx, node, vmid)
		if err != nil {
			return err
		}
		cur := cfg.str(name)
		switch {
		case cur == "":
			return fmt.Errorf("pve: vmid %d has no disk %s: %w", vmid, name, backends.ErrNotFound)
		case strings.Contains(cur, "media=cdrom"):
			return fmt.Errorf("pve: vmid %d: %s is a CD drive, not a disk", vmid, name)
		}
		have := diskGB(cur)
		if float64(sizeGB) < have {
			return fmt.Errorf("pve: vmid %d: %s is %gG; disks cannot shrink (asked for %dG)", vmid, name, have, sizeGB)
		}
		if float64(sizeGB) == have {
			return nil
		}
		var upid string
		op := fmt.Sprintf("resize %s of vmid %d", name, vmid)
		if err := b.put(ctx, op, vmPath(node, vmid)+"/resize",
			map[string]any{"disk": name, "size": fmt.Sprintf("%dG", sizeGB)}, &upid); err != nil {
			return err
		}
		b.cl.invalidate()
		if upid == "" {
			return nil
		}
		return b.finish(ctx, backends.Task{ID: upid, VMID: vmid}, op)
	})
}

// AddDisks adds count scsiN disks of sizeGB on the configured storage, or
// on scsi0's, and answers their names; it waits for PVE's config task.
func (b *Backend) AddDisks(ctx context.Context, vmid int, sizeGB, count int) ([]string, error) {
	if sizeGB < 1 || count < 1 {
		return nil, fmt.Errorf("pve: add disks to vmid %d: want at least one disk of at least 1 GB", vmid)
	}
	var names []string
	err := b.withVM(ctx, vmid, func(node string) error {
		cfg, err := b.config(ctx, node, vmid)
		if err != nil {
			return err
		}
		storage := b.storage
		if storage == "" {
			storage, _, _ = strings.Cut(cfg.str("scsi0"), ":")
		}
		if storage == "" {
			return fmt.Errorf("pve: add disks to vmid %d: no storage configured and no scsi0 to copy it from", vmid)
		}
		body := map[string]any{}
		names = names[:0]
		for i := 0; i < maxSCSI && len(names) < count; i++ {
			key := fmt.Sprintf("scsi%d", i)
			if _, used := cfg[key]; !used {
				body[key] = fmt.Sprintf("%s:%d", storage, sizeGB)
				names = append(names, key)
			}
		}
		if len(names) < count {
			return fmt.Errorf("pve: vmid %d has only %d free scsi slots (asked for %d)", vmid, len(names), count)
		}
		var upid string
		op := fmt.Sprintf("add %d disk(s) to vmid %d", count, vmid)
		if err := b.post(ctx, op, vmPath(node, vmid)+"/config", body, &upid); err != nil {
			return err
		}
		b.cl.invalidate()
		if upid == "" {
			return nil
		}
		return b.finish(ctx, backends.Task{ID: upid, VMID: vmid}, op)
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}
