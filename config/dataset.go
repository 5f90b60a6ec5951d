package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Dataset is the training-dataset capture: with a directory set, every
// console frame the server captures is also saved with its AT-SPI dump and
// its OCR words (README: Training dataset).
type Dataset struct {
	Dir   string `toml:"dir"`   // "" = no capture (POLIGON_MCP_DATASET)
	Agent string `toml:"agent"` // the prefix of the files, <agent>-shot-NNNN.png; default: the caller's owner
	// XRandR is the screen mode set in the guest once per boot, so the
	// guest's coordinates match the console frame: WIDTHxHEIGHT, default
	// 1280x800; "off" leaves the guest's mode alone.
	XRandR string `toml:"xrandr"`
	// MinFreeMB is the free-space floor of the dataset's volume: capture
	// stops below it (counted as no_space). Default (and 0): 2048.
	MinFreeMB int `toml:"min_free_mb"`
}

// Capturing reports whether a dataset directory is set.
func (d Dataset) Capturing() bool { return d.Dir != "" }

// Mode answers the screen mode to set, "" for none.
func (d Dataset) Mode() string {
	if d.XRandR == "off" {
		return ""
	}
	return d.XRandR
}

// The defaults of a capture.
const (
	defaultDatasetMode      = "1280x800"
	defaultDatasetMinFreeMB = 2048
)

func (c *Config) datasetDefaults() {
	d := &c.Dataset
	if d.XRandR == "" {
		d.XRandR = defaultDatasetMode
	}
	if d.MinFreeMB == 0 {
		d.MinFreeMB = defaultDatasetMinFreeMB
	}
}

var (
	screenMode   = regexp.MustCompile(`^[1-9][0-9]{2,4}x[1-9][0-9]{2,4}$`)
	datasetAgent = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$`)
)

// checkDataset checks the [dataset] settings.
func (c *Config) checkDataset() []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	d := c.Dataset
	if d.XRandR != "off" && !screenMode.MatchString(d.XRandR) {
		bad("dataset.xrandr %q (POLIGON_MCP_DATASET_XRANDR): a screen mode WIDTHxHEIGHT such as 1280x800, or off to leave the guest alone", d.XRandR)
	}
	if d.MinFreeMB < 0 {
		bad("dataset.min_free_mb %d (POLIGON_MCP_DATASET_MIN_FREE_MB): MB of free space (default 2048)", d.MinFreeMB)
	}
	if d.Agent != "" && !datasetAgent.MatchString(d.Agent) {
		bad("dataset.agent %q (POLIGON_MCP_DATASET_AGENT): letters, digits, '.', '_' and '-', at most 64, not starting with a dot: it starts file names", d.Agent)
	}
	if d.Dir != "" {
		// The benchmark is frozen: a frame captured into it would be
		// trained on and measured with.
		abs, err := filepath.Abs(d.Dir)
		if err == nil && slices.ContainsFunc(strings.Split(abs, string(filepath.Separator)), func(p string) bool { return p == "holo2-eval" }) {
			bad("dataset.dir %q (POLIGON_MCP_DATASET) is inside holo2-eval/, the frozen benchmark: capture somewhere else", d.Dir)
		}
	}
	return problems
}
