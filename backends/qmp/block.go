package qmp

import (
	"context"
	"strings"
	"time"
)

// BlockInfo is one block device as query-block reports it.
type BlockInfo struct {
	Device    string       `json:"device"` // legacy drive name; empty for -blockdev + -device
	Qdev      string       `json:"qdev"`   // "cd0", or a QOM path such as /machine/peripheral/vd0/virtio-backend
	Removable bool         `json:"removable"`
	Locked    bool         `json:"locked"`    // the guest locked the tray
	TrayOpen  bool         `json:"tray_open"` // only meaningful when Removable
	Inserted  *BlockMedium `json:"inserted"`  // nil when no medium is in
}

// ID is the device's qdev id ("cd0", "vd0"): Qdev, or the device's name
// within a /machine/peripheral/... QOM path.
func (b BlockInfo) ID() string {
	if rest, ok := strings.CutPrefix(b.Qdev, "/machine/peripheral/"); ok {
		id, _, _ := strings.Cut(rest, "/")
		return id
	}
	return b.Qdev
}

// BlockMedium is the medium in a block device.
type BlockMedium struct {
	File        string    `json:"file"`
	NodeName    string    `json:"node-name"` // given with -blockdev node-name=, else generated ("#block123")
	Driver      string    `json:"drv"`       // format driver: "qcow2", "raw"
	ReadOnly    bool      `json:"ro"`
	BackingFile string    `json:"backing_file"`
	Image       ImageInfo `json:"image"`
}

// ImageInfo describes the image behind a medium.
type ImageInfo struct {
	Filename    string         `json:"filename"`
	Format      string         `json:"format"`
	VirtualSize int64          `json:"virtual-size"`
	ActualSize  int64          `json:"actual-size"`
	Snapshots   []SnapshotInfo `json:"snapshots"` // internal snapshots (qcow2)
}

// SnapshotInfo is an internal snapshot of an image.
type SnapshotInfo struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	VMStateSize int64  `json:"vm-state-size"` // 0 for a disk-only snapshot
	DateSec     int64  `json:"date-sec"`
	DateNsec    int64  `json:"date-nsec"`
	VMClockSec  int64  `json:"vm-clock-sec"`
	VMClockNsec int64  `json:"vm-clock-nsec"`
}

// Date is when the snapshot was taken.
func (s SnapshotInfo) Date() time.Time { return time.Unix(s.DateSec, s.DateNsec) }

// QueryBlock lists the VM's block devices.
func (c *Client) QueryBlock(ctx context.Context) ([]BlockInfo, error) {
	var blocks []BlockInfo
	err := c.Execute(ctx, "query-block", nil, &blocks)
	return blocks, err
}

// BlockdevChangeMedium opens the tray of device id (a qdev id such as "cd0"),
// puts filename in and closes it. format may be empty to let QEMU probe.
func (c *Client) BlockdevChangeMedium(ctx context.Context, id, filename, format string) error {
	args := map[string]string{"id": id, "filename": filename}
	if format != "" {
		args["format"] = format
	}
	return c.Execute(ctx, "blockdev-change-medium", args, nil)
}

// Eject removes the medium of device id and leaves its tray open; force
// ejects even when the guest locked the tray.
func (c *Client) Eject(ctx context.Context, id string, force bool) error {
	return c.Execute(ctx, "eject", map[string]any{"id": id, "force": force}, nil)
}

// BlockResize sets the size of a block node, in bytes.
func (c *Client) BlockResize(ctx context.Context, nodeName string, size int64) error {
	return c.Execute(ctx, "block_resize", map[string]any{"node-name": nodeName, "size": size}, nil)
}
