package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestDatasetDefaults(t *testing.T) {
	c, problems := load(t, "", nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	d := c.Dataset
	if d.Capturing() || d.XRandR != "1280x800" || d.Mode() != "1280x800" || d.MinFreeMB != 2048 || d.Agent != "" {
		t.Fatalf("dataset defaults: %+v", d)
	}
}

func TestDatasetFileAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	c, problems := load(t, `
[dataset]
dir = "/nowhere"
agent = "file-agent"
xrandr = "1024x768"
min_free_mb = 100
`, map[string]string{
		"POLIGON_MCP_DATASET":             dir,
		"POLIGON_MCP_DATASET_AGENT":       "holo2.run-1",
		"POLIGON_MCP_DATASET_XRANDR":      "off",
		"POLIGON_MCP_DATASET_MIN_FREE_MB": "512",
	})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	d := c.Dataset
	if !d.Capturing() || d.Dir != dir || d.Agent != "holo2.run-1" || d.XRandR != "off" || d.Mode() != "" || d.MinFreeMB != 512 {
		t.Fatalf("the environment over the file: %+v", d)
	}
	for _, v := range []string{"POLIGON_MCP_DATASET", "POLIGON_MCP_DATASET_AGENT", "POLIGON_MCP_DATASET_XRANDR", "POLIGON_MCP_DATASET_MIN_FREE_MB"} {
		if c.Source[v] != "env" {
			t.Errorf("%s is not recorded as set by the environment: %v", v, c.Source)
		}
	}
	c, problems = load(t, "[dataset]\ndir = \"/srv/capture\"\nxrandr = \"1024x768\"\nmin_free_mb = 100\n", nil)
	if len(problems) > 0 || c.Dataset.Mode() != "1024x768" || c.Dataset.MinFreeMB != 100 || c.Dataset.Dir != "/srv/capture" {
		t.Fatalf("the file's dataset: %+v %v", c.Dataset, problems)
	}
}

func TestDatasetProblems(t *testing.T) {
	eval := filepath.Join(t.TempDir(), "holo2-eval", "capture")
	_, problems := load(t, `
[dataset]
dir = "`+eval+`"
agent = ".hidden/agent"
xrandr = "big"
min_free_mb = -1
`, nil)
	var all []string
	for _, p := range problems {
		all = append(all, p.Error())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		`dataset.xrandr "big" (POLIGON_MCP_DATASET_XRANDR): a screen mode WIDTHxHEIGHT`,
		`dataset.min_free_mb -1`,
		`dataset.agent ".hidden/agent"`,
		`is inside holo2-eval/, the frozen benchmark`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing problem %q in:\n%s", want, text)
		}
	}
	if _, problems := load(t, "", map[string]string{"POLIGON_MCP_DATASET_MIN_FREE_MB": "lots"}); len(problems) != 1 ||
		!strings.Contains(problems[0].Error(), "POLIGON_MCP_DATASET_MIN_FREE_MB") {
		t.Errorf("a floor that is not a number: %v", problems)
	}
}
