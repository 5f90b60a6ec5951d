// Package image holds the checks of poligon's deployment files (deploy/,
// .env.example) and the build-and-run test of its container image
// (image_test.go, POLIGON_IMAGE_TEST=1; `make image-test`).
package image

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repo is the checkout's root.
const repo = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPlainUnit: systemd itself reads deploy/poligon.service.
func TestPlainUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze on this machine: the unit is not verified")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart's binary exists: point it at one that does.
	unit := strings.ReplaceAll(read(t, "deploy/poligon.service"), "/usr/local/bin/poligon", self)
	path := filepath.Join(t.TempDir(), "poligon.service")
	os.WriteFile(path, []byte(unit), 0o644)
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify poligon.service: %v\n%s", err, out)
	}
}

// quadlet45 are the [Container] keys Quadlet knows since podman 4.5 (its
// pkg/systemd/quadlet supportedContainerKeys at v4.5.0), the first with
// UserNS=: a key outside them breaks the unit on the podman it targets.
var quadlet45 = strings.Fields(`AddCapability AddDevice Annotation ContainerName DropCapability Environment
	EnvironmentFile EnvironmentHost Exec ExposeHostPort Group HealthCmd HealthInterval HealthOnFailure HealthRetries
	HealthStartPeriod HealthStartupCmd HealthStartupInterval HealthStartupRetries HealthStartupSuccess
	HealthStartupTimeout HealthTimeout Image IP IP6 Label LogDriver Mount Network NoNewPrivileges Notify PodmanArgs
	PublishPort ReadOnly RemapGid RemapUid RemapUidSize RemapUsers Rootfs RunInit SeccompProfile SecurityLabelDisable
	SecurityLabelFileType SecurityLabelLevel SecurityLabelType Secret Tmpfs Timezone User UserNS VolatileTmp Volume`)

// unitSections reads a systemd unit file: section -> key -> values.
func unitSections(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("line %d: %q is neither a section nor key=value", n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestQuadletUnit(t *testing.T) {
	text := read(t, "deploy/poligon.container")
	u := unitSections(t, text)
	c := u["Container"]
	for k := range c {
		if !slices.Contains(quadlet45, k) {
			t.Errorf("[Container] %s= is not a key Quadlet 4.5 knows", k)
		}
	}
	if got := c["UserNS"]; !slices.Equal(got, []string{"keep-id:uid=1000,gid=1000"}) {
		t.Errorf("UserNS = %v", got)
	}
	var targets []string
	for _, v := range c["Volume"] {
		targets = append(targets, strings.Split(v, ":")[1])
	}
	for _, want := range []string{"/etc/poligon/certs", "/etc/poligon/scripts", "/evidence", "/var/lib/poligon", "/etc/poligon/config.toml"} {
		if !slices.Contains(targets, want) {
			t.Errorf("no volume on %s: %v", want, targets)
		}
	}

	// The generator itself, where this machine has it.
	quadlet := os.Getenv("POLIGON_QUADLET")
	for _, p := range []string{"/usr/libexec/podman/quadlet", "/usr/lib/podman/quadlet"} {
		if _, err := os.Stat(p); err == nil && quadlet == "" {
			quadlet = p
		}
	}
	if quadlet == "" {
		t.Skip("no Quadlet generator here (podman 4.5 or later has it; Debian 12's podman 4.3 does not): checked its keys only")
	}
	units := t.TempDir()
	os.WriteFile(filepath.Join(units, "poligon.container"), []byte(text), 0o644)
	cmd := exec.Command(quadlet, "-dryrun", "-user")
	cmd.Env = append(os.Environ(), "QUADLET_UNIT_DIRS="+units)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--userns keep-id:uid=1000,gid=1000") {
		t.Fatalf("quadlet -dryrun: %v\n%s", err, out)
	}
	t.Logf("quadlet -dryrun:\n%s", out)
}

func TestCompose(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil || exec.Command(py, "-c", "import yaml").Run() != nil {
		t.Skip("no python3 with PyYAML here: compose.yaml is not parsed")
	}
	out, err := exec.Command(py, "-c", "import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
		filepath.Join(repo, "deploy/compose.yaml")).Output()
	if err != nil {
		t.Fatalf("compose.yaml does not parse as YAML: %v", err)
	}
	var doc struct {
		Services map[string]struct {
			Image, UsernsMode, StopGracePeriod, EnvFile string
			Ports, Volumes                              []string
			Healthcheck                                 struct{ Test string }
			Build                                       struct{ Context, Dockerfile string }
		}
	}
	// The keys are snake_case: map them onto the fields above.
	fixed := regexp.MustCompile(`"(userns_mode|stop_grace_period|env_file)"`).ReplaceAllStringFunc(string(out), func(s string) string {
		return strings.ReplaceAll(s, "_", "")
	})
	if err := json.Unmarshal([]byte(fixed), &doc); err != nil {
		t.Fatal(err)
	}
	s, ok := doc.Services["poligon"]
	if !ok {
		t.Fatalf("no service poligon: %s", out)
	}
	if s.UsernsMode != "keep-id:uid=1000,gid=1000" || s.StopGracePeriod != "90s" || s.EnvFile != ".env" ||
		!strings.Contains(s.Healthcheck.Test, "--healthcheck http://127.0.0.1:8811/readyz") || s.Build.Dockerfile != "Containerfile" {
		t.Errorf("compose service: %+v", s)
	}
	if _, err := os.Stat(filepath.Join(repo, "deploy", s.Build.Context, s.Build.Dockerfile)); err != nil {
		t.Errorf("the build context does not hold the Containerfile: %v", err)
	}

	pc, err := exec.LookPath("podman-compose")
	if err != nil {
		t.Skip("no podman-compose here: compose.yaml parsed as YAML only")
	}
	// podman-compose reads .env beside the file: run it on a copy.
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "deploy"), 0o755)
	os.WriteFile(filepath.Join(dir, "deploy", "compose.yaml"), []byte(read(t, "deploy/compose.yaml")), 0o644)
	os.WriteFile(filepath.Join(dir, "deploy", ".env"), []byte(read(t, ".env.example")), 0o644)
	os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(read(t, "Containerfile")), 0o644)
	cmd := exec.Command(pc, "--dry-run", "-f", "compose.yaml", "up", "-d")
	cmd.Dir = filepath.Join(dir, "deploy")
	got, err := cmd.CombinedOutput()
	for _, want := range []string{"podman run ", "-p 127.0.0.1:8811:8811", "--env-file ", ":/etc/poligon/certs:", "--healthcheck-command"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("podman-compose --dry-run up: no %q (%v)\n%s", want, err, got)
		}
	}
}

// TestEnvExample: .env.example names every environment variable the
// server reads, each after a line that says what it means.
func TestEnvExample(t *testing.T) {
	example := read(t, ".env.example")
	named := map[string]bool{}
	lines := strings.Split(example, "\n")
	for i, l := range lines {
		if m := regexp.MustCompile(`^#?([A-Z][A-Z0-9_]+)=`).FindStringSubmatch(l); m != nil {
			named[m[1]] = true
			if i == 0 || !strings.HasPrefix(lines[i-1], "# ") && !regexp.MustCompile(`^#[A-Z]`).MatchString(lines[i-1]) {
				t.Errorf(".env.example: %s has no line of meaning before it", m[1])
			}
		}
	}
	// Every variable name a non-test source of the server mentions.
	name := regexp.MustCompile(`"((?:POLIGON|PV_AI|PVE|SSL_CERT|TESSDATA|OMP|XDG|DEBUG)_[A-Z0-9_]+)"`)
	read := map[string]string{}
	for _, dir := range []string{"cmd", "config", "engine", "hostapi", "backends", "internal", "runtime"} {
		filepath.WalkDir(filepath.Join(repo, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") ||
				strings.Contains(p, "/internal/testvm/") || strings.Contains(p, "test/") {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, m := range name.FindAllStringSubmatch(string(b), -1) {
				read[m[1]] = p
			}
			return nil
		})
	}
	if len(read) < 30 {
		t.Fatalf("found only %d variables in the sources: the scan is broken", len(read))
	}
	for v, where := range read {
		if !named[v] {
			t.Errorf("%s (read in %s) is not in .env.example", v, where)
		}
	}
}
