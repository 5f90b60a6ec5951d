package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// template is one templates/<name>.toml: a disk image, or a kernel + initrd
// pair, plus the machine it wants. Paths are relative to the templates dir.
type template struct {
	Name     string `toml:"name"`
	VMID     int    `toml:"vmid"`
	Disk     string `toml:"disk"`
	Kernel   string `toml:"kernel"`
	Initrd   string `toml:"initrd"`
	Cmdline  string `toml:"cmdline"`
	MemoryMB int    `toml:"memory_mb"`
	Cores    int    `toml:"cores"`
	Firmware string `toml:"firmware"` // "bios" (default) or "uefi"
	DiskGB   int    `toml:"disk_gb"`  // kernel templates: size of the empty disk each clone gets

	dir string // the templates dir, for resolving paths
}

func (t template) path(rel string) string {
	if rel == "" || filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(t.dir, rel)
}

func (t template) validate() error {
	switch {
	case t.Name == "":
		return errors.New("name is empty")
	case t.VMID < 100:
		return fmt.Errorf("vmid %d is below 100", t.VMID)
	case t.Disk == "" && t.Kernel == "":
		return errors.New("neither disk nor kernel is set")
	case t.Disk != "" && t.Kernel != "":
		return errors.New("both disk and kernel are set: a template boots one way")
	case t.Firmware != "" && t.Firmware != "bios" && t.Firmware != "uefi":
		return fmt.Errorf("firmware %q is neither bios nor uefi", t.Firmware)
	}
	for _, f := range []string{t.Disk, t.Kernel, t.Initrd} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(t.path(f)); err != nil {
			return fmt.Errorf("missing file: %w", err)
		}
	}
	return nil
}

// loadTemplates reads every *.toml in dir. A broken file does not hide the
// good ones: it is reported in problems and skipped.
func loadTemplates(dir string) (tpls []template, problems []error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil {
		return nil, []error{err}
	}
	sort.Strings(files)
	seen := map[int]string{}
	for _, f := range files {
		var t template
		if _, err := toml.DecodeFile(f, &t); err != nil {
			problems = append(problems, fmt.Errorf("template %s: %w", filepath.Base(f), err))
			continue
		}
		t.dir = dir
		if t.Name == "" {
			t.Name = strings.TrimSuffix(filepath.Base(f), ".toml")
		}
		if err := t.validate(); err != nil {
			problems = append(problems, fmt.Errorf("template %s: %w", filepath.Base(f), err))
			continue
		}
		if other, dup := seen[t.VMID]; dup {
			problems = append(problems, fmt.Errorf("template %s: vmid %d is taken by template %s", filepath.Base(f), t.VMID, other))
			continue
		}
		seen[t.VMID] = t.Name
		if t.MemoryMB == 0 {
			t.MemoryMB = 512
		}
		if t.Cores == 0 {
			t.Cores = 1
		}
		if t.Firmware == "" {
			t.Firmware = "bios"
		}
		if t.DiskGB == 0 {
			t.DiskGB = 1
		}
		tpls = append(tpls, t)
	}
	return tpls, problems
}
