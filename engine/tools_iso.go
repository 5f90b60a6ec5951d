package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
)

// The installer tools: ISOs, VMs that boot from one, their disks and CD.

type isoListArgs struct {
	Filter  string `json:"filter,omitempty" desc:"a substring of the name"`
	Storage string `json:"storage,omitempty" desc:"default: the bench's ISO storage (Proxmox)"`
}

type createISOArgs struct {
	Name    string `json:"name" desc:"becomes <owner>-repro-<name>"`
	ISO     string `json:"iso" desc:"a volid from iso_list"`
	DiskGB  int    `json:"disk_gb,omitempty" desc:"size of each disk" default:"32" min:"1" max:"4096"`
	MemMB   int    `json:"mem_mb,omitempty" default:"4096" min:"64" max:"262144"`
	Cores   int    `json:"cores,omitempty" default:"2" min:"1" max:"64"`
	Disks   int    `json:"disks,omitempty" desc:"RAID installs want several" default:"1" min:"1" max:"8"`
	UEFI    bool   `json:"uefi,omitempty" desc:"UEFI (OVMF) instead of BIOS" default:"false"`
	Pool    string `json:"pool,omitempty" desc:"when you have several (Proxmox)"`
	Storage string `json:"storage,omitempty" desc:"for its disks (Proxmox)"`
}

type diskResizeArgs struct {
	VMID   int    `json:"vmid" min:"1"`
	Disk   string `json:"disk,omitempty" desc:"scsi0, scsi1, ... (or disk0, disk1)" default:"scsi0"`
	SizeGB int    `json:"size_gb" desc:"the new size; disks only grow" min:"1" max:"65536"`
}

type diskAddArgs struct {
	VMID   int `json:"vmid" min:"1"`
	SizeGB int `json:"size_gb" desc:"size of each" min:"1" max:"65536"`
	Count  int `json:"count,omitempty" default:"1" min:"1" max:"8"`
}

func isoTools() []*Tool {
	return []*Tool{
		newTool(Def{Name: "iso_list", Toolset: "iso", Title: "List installer ISOs",
			Description: "Installer ISOs on the bench's storage: TSV volid, size.",
			Summary:     "Installer ISOs: TSV volid, size",
			Effect:      readOnly("lists the storage's ISOs")}, isoList),
		newTool(Def{Name: "vm_create_iso", Toolset: "iso", Title: "Create a VM from an ISO",
			Description: "Create a VM <owner>-repro-<name> with empty disks that boots an installer ISO (partitioning, RAID, LUKS bugs). No guest agent until installed: vm_start, then drive the installer with ui_*.",
			Summary:     "A VM that boots an installer ISO",
			Effect:      additiveOnce("adds a VM with empty disks; a name that exists is refused")}, createISO),
		newTool(Def{Name: "vm_eject", Toolset: "iso", Title: "Eject the installer CD",
			Description: "Remove the installer CD so the VM boots from disk.",
			Summary:     "Remove the installer CD",
			Effect:      destructiveOnce("empties the CD drive under an installer that may still read it")}, eject),
		newTool(Def{Name: "vm_disk_resize", Toolset: "iso", Title: "Grow a disk",
			Description: "Grow a VM disk.",
			Summary:     "Grow a disk",
			Effect:      additiveOnce("grows a disk to a size; disks only grow")}, diskResize),
		newTool(Def{Name: "vm_disk_add", Toolset: "iso", Title: "Add disks",
			Description: "Add empty disks (RAID installs).",
			Summary:     "Add empty disks",
			Effect:      additive("adds disks; every call adds more")}, diskAdd),
	}
}

func isoList(ctx context.Context, c *Call, in *isoListArgs) (*mcp.CallToolResult, error) {
	isos, err := c.Caller.ISOs(ctx, in.Storage)
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for _, iso := range isos {
		if strings.Contains(iso.VolID, in.Filter) {
			rows = append(rows, []string{iso.VolID, strconv.FormatInt(iso.Size, 10)})
		}
	}
	if len(rows) == 0 {
		return text("no ISOs%s (the local backend lists the .iso files in its data directory's isos/)", filterNote(in.Filter)), nil
	}
	return text("%s", tsv(rows)), nil
}

func filterNote(f string) string {
	if f == "" {
		return ""
	}
	return fmt.Sprintf(" matching %q", f)
}

func createISO(ctx context.Context, c *Call, in *createISOArgs) (*mcp.CallToolResult, error) {
	res, err := c.Caller.CreateFromISO(ctx, hostapi.ISOVM{
		Name: in.Name, ISO: in.ISO, DiskGB: in.DiskGB, Disks: in.Disks, MemMB: in.MemMB,
		Cores: in.Cores, UEFI: in.UEFI, Pool: in.Pool, Storage: in.Storage,
	})
	if err != nil {
		return nil, err
	}
	return createdAnswer(res)
}

func eject(ctx context.Context, c *Call, in *vmArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		if err := v.Eject(ctx); err != nil {
			return nil, err
		}
		return text("ok: vmid %d CD ejected", in.VMID), nil
	})
}

func diskResize(ctx context.Context, c *Call, in *diskResizeArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		if err := v.ResizeDisk(ctx, in.Disk, in.SizeGB); err != nil {
			return nil, err
		}
		return text("ok: vmid %d %s is %d GB", in.VMID, in.Disk, in.SizeGB), nil
	})
}

func diskAdd(ctx context.Context, c *Call, in *diskAddArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		names, err := v.AddDisks(ctx, in.SizeGB, in.Count)
		if err != nil && len(names) > 0 {
			return nil, hostapi.Failf(fmt.Sprintf("%s were added before it failed; vm_disk_add again adds the rest", strings.Join(names, ", ")), "%v", err)
		}
		if err != nil {
			return nil, err
		}
		return text("ok: vmid %d added %s (%d GB each)", in.VMID, strings.Join(names, ", "), in.SizeGB), nil
	})
}
