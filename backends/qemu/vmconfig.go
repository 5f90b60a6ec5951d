package qemu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// vmConfig is vms/<vmid>/vm.toml: everything needed to start the VM again,
// by this process or by a later one.
type vmConfig struct {
	VMID     int       `toml:"vmid"`
	Name     string    `toml:"name"`
	Template string    `toml:"template,omitempty"` // where it was cloned from
	Created  time.Time `toml:"created"`
	MemoryMB int       `toml:"memory_mb"`
	Cores    int       `toml:"cores"`
	Firmware string    `toml:"firmware"`
	Kernel   string    `toml:"kernel,omitempty"` // absolute paths
	Initrd   string    `toml:"initrd,omitempty"`
	Cmdline  string    `toml:"cmdline,omitempty"`
	CDROM    string    `toml:"cdrom,omitempty"` // absolute path of the ISO in the drive
	HasCD    bool      `toml:"has_cd,omitempty"`
	Disks    []disk    `toml:"disks"`
	// Network is the stand network the VM joins at start (see network.go);
	// "" (and every vm.toml older than stands) is QEMU's own user networking.
	Network string `toml:"network,omitempty"`
	// Lock names an operation that owns the VM's files ("clone" while a full
	// copy runs); such a VM cannot be started.
	Lock string `toml:"lock,omitempty"`
}

// disk is one virtio disk; File is relative to the VM dir.
type disk struct {
	Name string `toml:"name"` // node name and the tools' disk name: disk0, disk1, ...
	File string `toml:"file"`
}

func readVMConfig(path string) (vmConfig, error) {
	var c vmConfig
	if _, err := toml.DecodeFile(path, &c); err != nil {
		return c, err
	}
	return c, nil
}

// write saves the config atomically, so a crash never leaves half a file.
func (c vmConfig) write(path string) error {
	var buf bytes.Buffer
	buf.WriteString("# a VM of poligon's local QEMU backend; edit only while it is stopped\n")
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (c vmConfig) disk(name string) (disk, bool) {
	for _, d := range c.Disks {
		if d.Name == name {
			return d, true
		}
	}
	return disk{}, false
}

// nextDiskName answers the first free diskN.
func (c vmConfig) nextDiskName() string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("disk%d", i)
		if _, taken := c.disk(name); !taken {
			return name
		}
	}
}

// diskNames lists the disk node names, the devices a snapshot covers.
func (c vmConfig) diskNames() []string {
	names := make([]string, len(c.Disks))
	for i, d := range c.Disks {
		names[i] = d.Name
	}
	return names
}

func (c vmConfig) diskPath(dir string, d disk) string {
	if filepath.IsAbs(d.File) {
		return d.File
	}
	return filepath.Join(dir, d.File)
}

// validDiskName accepts the names the tools use: disk0, disk1, ...; "scsi0"
// (the Proxmox name the manual uses) maps to disk0 so the same call works on
// both backends.
func validDiskName(name string) (string, bool) {
	for _, prefix := range []string{"disk", "scsi", "virtio"} {
		if n, ok := strings.CutPrefix(name, prefix); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return "disk" + n, true
		}
	}
	return "", false
}
