package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func load(t *testing.T, file string, env map[string]string) (*Config, []error) {
	t.Helper()
	path := ""
	if file != "" {
		path = filepath.Join(t.TempDir(), "config.toml")
		os.WriteFile(path, []byte(file), 0o600)
	}
	base := map[string]string{"POLIGON_OWNER": "tester", "POLIGON_DATA": t.TempDir(), "POLIGON_STATE": t.TempDir()}
	for k, v := range env {
		base[k] = v
	}
	return Load(path, path != "", func(k string) string { return base[k] })
}

func TestDefaults(t *testing.T) {
	c, problems := load(t, "", nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if len(c.Benches) != 1 || c.Benches[0].Type != "qemu" || c.DefaultBench != "local" || c.Server.Bind != "127.0.0.1:8811" {
		t.Fatalf("defaults: %+v", c)
	}
	if c.Limits.MaxWait.Seconds() != 50 || c.Limits.BusyWait.Seconds() != 30 || c.Limits.ScriptTimeout.Minutes() != 10 {
		t.Fatalf("limits: %+v", c.Limits)
	}
}

func TestFileAndEnvironment(t *testing.T) {
	evidence := t.TempDir()
	sum := sha256.Sum256([]byte("a-long-enough-token-1"))
	c, problems := load(t, fmt.Sprintf(`
owner = "alice"
evidence_dir = %q
default_bench = "lab"
[[bench]]
name = "lab"
type = "qemu"
[[bench]]
name = "cluster"
type = "pve"
api = "https://pve.example.org:8006/api2/json"
token = "alice@pve!t=11111111-2222-3333-4444-555555555555"
[[token]]
owner = "alice"
sha256 = %q
[[token]]
owner = "bob"
token = "bob-token-0123456789"
[limits]
max_wait = "40s"
`, evidence, hex.EncodeToString(sum[:])), map[string]string{"POLIGON_MCP_ALLOWED_HOSTS": "a.example.org, b.example.org:8811"})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if c.Owner != "tester" { // the environment wins over the file
		t.Errorf("owner = %q", c.Owner)
	}
	if c.DefaultBench != "lab" || len(c.Benches) != 2 || c.Limits.MaxWait.Seconds() != 40 {
		t.Errorf("config = %+v", c)
	}
	if strings.Join(c.Server.AllowedHosts, " ") != "a.example.org b.example.org:8811" {
		t.Errorf("allowed hosts = %q", c.Server.AllowedHosts)
	}
	if owner, ok := c.OwnerOfToken("a-long-enough-token-1"); !ok || owner != "alice" {
		t.Errorf("sha256 token: %q %v", owner, ok)
	}
	if owner, ok := c.OwnerOfToken("bob-token-0123456789"); !ok || owner != "bob" {
		t.Errorf("plain token: %q %v", owner, ok)
	}
	if _, ok := c.OwnerOfToken("wrong"); ok {
		t.Error("a wrong token maps to an owner")
	}
	// Printing the config never shows a secret.
	var buf bytes.Buffer
	toml.NewEncoder(&buf).Encode(c)
	fmt.Fprintf(&buf, "%v %+v %#v", c, c, c.Benches)
	if s := buf.String(); strings.Contains(s, "11111111-2222") || strings.Contains(s, "bob-token") {
		t.Fatalf("a secret printed:\n%s", s)
	}
}

func TestProblems(t *testing.T) {
	_, problems := load(t, `
default_bench = "nosuch"
log_level = "loud"
[[bench]]
name = "Bad Name"
type = "qemu"
[[bench]]
name = "p"
type = "pve"
api = "http://plain.example.org"
token = "no-bang"
[[bench]]
name = "x"
type = "vmware"
[[token]]
owner = "Alice"
token = "tiny1"
[server]
bind = "nonsense"
`, nil)
	var all []string
	for _, p := range problems {
		all = append(all, p.Error())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		`bench "Bad Name": name must match`,
		`bench "p": api must be an https:// URL`,
		`bench "p": token must look like user@realm!tokenid=secret`,
		`bench "x": type must be qemu, pve, pikvm, bmc or megarac`,
		`default_bench "nosuch" is not a configured bench`,
		`token[0]: owner must be lowercase letters and digits`,
		`server.bind "nonsense"`,
		`log_level "loud"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing problem %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "no-bang") || strings.Contains(text, "tiny1") {
		t.Errorf("a problem quotes a secret:\n%s", text)
	}
	if _, problems := load(t, "unknown_key = 1\n", nil); len(problems) != 1 || !strings.Contains(problems[0].Error(), "unknown keys: unknown_key") {
		t.Errorf("unknown key: %v", problems)
	}
	if _, problems := Load(filepath.Join(t.TempDir(), "missing.toml"), true, func(string) string { return "" }); len(problems) != 1 {
		t.Errorf("an explicit missing file: %v", problems)
	}
}

func TestPVEFromEnvironment(t *testing.T) {
	c, problems := load(t, "", map[string]string{"PVE_API": "https://pve:8006/api2/json", "PVE_TOKEN": "u@pve!t=secret-secret"})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	b, ok := c.Bench("")
	if !ok || b.Name != "pve" || b.Token.Reveal() != "u@pve!t=secret-secret" || len(c.Benches) != 2 {
		t.Fatalf("PVE_API bench: %+v", c.Benches)
	}
}

func TestPhysicalBenches(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "bmc-pw")
	os.WriteFile(pwFile, []byte("bmc-Secret-77\n"), 0o600)
	c, problems := load(t, `
[[bench]]
name = "kvm1"
type = "pikvm"
api = "https://kvm1.lab"
user = "admin"
password_env = "KVM1_PW"
rental = true
allow = ["hid", "power"]
approval = "ask"
[[bench]]
name = "srv2"
type = "megarac"
api = "https://srv2-bmc.lab"
user = "root"
password_file = "`+pwFile+`"
[[storage]]
name = "mirror"
type = "http"
address = "https://mirror.lab/iso"
`, map[string]string{"KVM1_PW": "kvm-Secret-42", "POLIGON_MCP_COMMON_KEY": "common-key-123456"})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	kvm, _ := c.Bench("kvm1")
	srv, _ := c.Bench("srv2")
	if kvm.Password.Reveal() != "kvm-Secret-42" || !kvm.Rental || kvm.Key.Reveal() != "common-key-123456" || len(kvm.Allow) != 2 {
		t.Errorf("kvm1 = %+v", kvm)
	}
	if srv.Type != "bmc" || srv.Dialect != "megarac" || srv.Password.Reveal() != "bmc-Secret-77" || strings.Join(srv.Allow, ",") != "hid" {
		t.Errorf("srv2 = %+v", srv)
	}
	if len(c.Storages) != 1 || c.Storages[0].Address != "https://mirror.lab/iso" {
		t.Errorf("storages = %+v", c.Storages)
	}
	if strings.Contains(fmt.Sprintf("%+v %#v", kvm, srv), "Secret-") {
		t.Errorf("a bench prints its password")
	}

	// The manual's variables, and the problems of a bad physical bench.
	c, problems = load(t, "", map[string]string{
		"POLIGON_MCP_STANDS":   `[{"name":"kvm2","type":"pikvm","api":"https://kvm2.lab","token":"admin:kvm2-Secret"},{"name":"bad","type":"pikvm","api":"http://x"}]`,
		"POLIGON_MCP_STORAGES": `[{"name":"nfs1","type":"nfs","address":"nfs.lab:/iso"}]`,
	})
	text := fmt.Sprint(problems)
	for _, want := range []string{`bench "bad": api must be the controller's https:// URL`, `bench "bad": user is missing`, `bench "bad": no password`} {
		if !strings.Contains(text, want) {
			t.Errorf("missing problem %q in %s", want, text)
		}
	}
	if k, _ := c.Bench("kvm2"); k.User != "admin" || k.Password.Reveal() != "kvm2-Secret" || len(c.Storages) != 1 {
		t.Errorf("POLIGON_MCP_STANDS: %+v, storages %+v", k, c.Storages)
	}
	if strings.Contains(text, "Secret") {
		t.Errorf("a problem quotes a secret: %s", text)
	}
}

// POLIGON_MCP_STANDS and POLIGON_MCP_STORAGES refuse a key they do not
// know, naming it, as the file does: a dropped pin_sha256 or allow would
// leave a bench trusting less (or allowing less) than its operator wrote,
// without a word.
func TestBenchEnvUnknownKeys(t *testing.T) {
	for _, tc := range []struct{ name, value, key string }{
		{"POLIGON_MCP_STANDS", `[{"name":"kvm2","type":"pikvm","api":"https://kvm2.lab","token":"admin:kvm2-Secret","pin_sha256":"ab"}]`, "pin_sha256"},
		{"POLIGON_MCP_STANDS", `[{"name":"kvm2","type":"pikvm","api":"https://kvm2.lab","token":"admin:kvm2-Secret","allow":["power"]}]`, "allow"},
		{"POLIGON_MCP_STORAGES", `[{"name":"nfs1","type":"nfs","address":"nfs.lab:/iso","allow":true}]`, "allow"},
	} {
		c, problems := load(t, "", map[string]string{tc.name: tc.value})
		text := fmt.Sprint(problems)
		if want := tc.name + ": unknown key " + tc.key; !strings.Contains(text, want) {
			t.Errorf("%s with %s: problems %s, want %q", tc.name, tc.key, text, want)
		}
		if strings.Contains(text, "Secret") {
			t.Errorf("a problem quotes a secret: %s", text)
		}
		if _, ok := c.Bench("kvm2"); ok || len(c.Storages) != 0 {
			t.Errorf("%s with an unknown key still configured benches %v, storages %v", tc.name, c.Benches, c.Storages)
		}
	}
}

func TestAccel(t *testing.T) {
	c, problems := load(t, "", nil)
	if len(problems) > 0 || c.Accel != "auto" || c.Benches[0].Accel != "auto" {
		t.Fatalf("default accel: %q, bench %q, %v", c.Accel, c.Benches[0].Accel, problems)
	}
	file := `
accel = "tcg"
[[bench]]
name = "lab"
type = "qemu"
[[bench]]
name = "fast"
type = "qemu"
accel = "kvm"
[[bench]]
name = "cluster"
type = "pve"
api = "https://pve.example.org:8006/api2/json"
`
	accels := func(c *Config) string {
		var s []string
		for _, b := range c.Benches {
			s = append(s, b.Name+"="+b.Accel)
		}
		return c.Accel + " " + strings.Join(s, " ")
	}
	// Benches inherit the top-level accel unless they set their own; a pve
	// bench has none.
	c, problems = load(t, file, nil)
	if got := accels(c); len(problems) > 0 || got != "tcg lab=tcg fast=kvm cluster=" {
		t.Fatalf("accels %q, %v", got, problems)
	}
	// POLIGON_ACCEL overrides the top-level one, not a bench's own.
	c, problems = load(t, file, map[string]string{"POLIGON_ACCEL": "auto"})
	if got := accels(c); len(problems) > 0 || got != "auto lab=auto fast=kvm cluster=" || c.Source["POLIGON_ACCEL"] != "env" {
		t.Fatalf("accels with POLIGON_ACCEL=auto: %q, source %q, %v", got, c.Source["POLIGON_ACCEL"], problems)
	}

	_, problems = load(t, `
accel = "fast"
[[bench]]
name = "lab"
type = "qemu"
[[bench]]
name = "own"
type = "qemu"
accel = "KVM"
[[bench]]
name = "p"
type = "pve"
api = "https://pve.example.org:8006/api2/json"
accel = "kvm"
`, nil)
	var all []string
	for _, p := range problems {
		all = append(all, p.Error())
	}
	want := []string{
		`bench "own": accel "KVM": use auto, kvm or tcg`,
		`bench "p": accel is for type qemu`,
		`accel "fast": use auto, kvm or tcg`,
	}
	if got := strings.Join(all, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if _, problems := load(t, "", map[string]string{"POLIGON_ACCEL": "on"}); len(problems) != 1 || problems[0].Error() != `accel "on": use auto, kvm or tcg` {
		t.Errorf("POLIGON_ACCEL=on: %v", problems)
	}
}

// The planner takes each of its endpoint and key from the vision model's
// unless its own is set; keys come from the environment or a file only.
func TestPlanner(t *testing.T) {
	c, problems := load(t, "", map[string]string{"PV_AI_API": "https://ai.example.org/v1/chat/completions", "PV_AI_KEY": "vision-key-123"})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	p := c.Planner
	if p.API != c.Vision.API || p.Key.Reveal() != "vision-key-123" || p.Model != "qwen3.8-27b" || p.Timeout.Seconds() != 120 || !p.Configured() {
		t.Errorf("planner from the vision defaults: %+v", p)
	}
	if c.Stands.MaxMachines != 4 || c.Stands.MaxBuilding != 2 {
		t.Errorf("stands defaults: %+v", c.Stands)
	}

	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte("file-key-456\n"), 0o600)
	c, problems = load(t, fmt.Sprintf(`
[planner]
api = "https://file.example.org/v1/chat/completions"
model = "file-model"
key_file = %q
options = '{"temperature":0}'
timeout = "30s"
[stands]
max_machines = 3
max_building = 1
`, keyFile), map[string]string{"PV_AI_API": "https://ai.example.org/v1", "PV_AI_KEY": "vision-key-123",
		"PV_AI_PLAN_MODEL": "env-model", "PV_AI_PLAN_OPTIONS": `{"temperature":0.2,"max_tokens":9000}`})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	p = c.Planner
	if p.API != "https://file.example.org/v1/chat/completions" || p.Model != "env-model" || p.Key.Reveal() != "file-key-456" ||
		p.Options != `{"temperature":0.2,"max_tokens":9000}` || p.Timeout.Seconds() != 30 || c.Source["PV_AI_PLAN_MODEL"] != "env" {
		t.Errorf("planner from file and env: %+v", p)
	}
	if c.Stands.MaxMachines != 3 || c.Stands.MaxBuilding != 1 {
		t.Errorf("stands: %+v", c.Stands)
	}

	// Its own variables win; a key_env that names an empty variable is no
	// key (not silently the vision one).
	c, _ = load(t, "", map[string]string{"PV_AI_API": "https://ai.example.org/v1", "PV_AI_KEY": "vision-key-123",
		"PV_AI_PLAN_API": "http://plan.example.org/v1/chat/completions", "PV_AI_PLAN_KEY": "plan-key-789"})
	if c.Planner.API != "http://plan.example.org/v1/chat/completions" || c.Planner.Key.Reveal() != "plan-key-789" {
		t.Errorf("PV_AI_PLAN_*: %+v", c.Planner)
	}
	c, _ = load(t, "[planner]\nkey_env = \"MY_PLAN_KEY\"\n", map[string]string{"PV_AI_API": "https://ai.example.org/v1", "PV_AI_KEY": "vision-key-123"})
	if c.Planner.Key != "" {
		t.Errorf("an empty key_env fell back to the vision key")
	}
	// Without a vision or planner endpoint there is no planner.
	if c, _ := load(t, "", nil); c.Planner.Configured() {
		t.Errorf("planner configured from nothing: %+v", c.Planner)
	}
	// Printing the config never shows the key.
	var buf bytes.Buffer
	toml.NewEncoder(&buf).Encode(c)
	fmt.Fprintf(&buf, "%v %+v", c, c.Planner)
	if strings.Contains(buf.String(), "vision-key-123") {
		t.Errorf("the key printed:\n%s", buf.String())
	}
}

func TestPlannerProblems(t *testing.T) {
	_, problems := load(t, `
[planner]
api = "ftp://x"
key = "inline-secret"
`, nil)
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "unknown keys: planner.key") {
		t.Errorf("a key in the file: %v", problems)
	}
	_, problems = load(t, `
[planner]
api = "ftp://x"
notes = "/nonexistent/notes.md"
key_file = "/nonexistent/key"
[stands]
max_machines = -1
max_building = -2
`, map[string]string{"PV_AI_PLAN_OPTIONS": `[1,2]`})
	var all []string
	for _, p := range problems {
		all = append(all, p.Error())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		"planner.api (PV_AI_PLAN_API, default PV_AI_API) must be an http(s) URL",
		`planner.options (PV_AI_PLAN_OPTIONS) must be a JSON object, e.g. {"temperature":0.1,"max_tokens":3000}`,
		"planner.notes:", "planner.key_file:", "stands.max_machines -1", "stands.max_building -2",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing problem %q in:\n%s", want, text)
		}
	}
}

// Every boolean variable is read one way: 1/true/yes/on and 0/false/no/off
// in any case, anything else a problem naming the variable; a variable can
// switch off what the file switched on.
func TestBooleanVariables(t *testing.T) {
	file := "[vision]\nsee_always = true\n"
	for _, tc := range []struct {
		v       string
		want    bool
		problem bool
	}{{"1", true, false}, {"on", true, false}, {"YES", true, false}, {"True", true, false},
		{"0", false, false}, {"off", false, false}, {"No", false, false}, {"false", false, false},
		{"", true, false}, {"maybe", true, true}, {"2", true, true}} {
		c, problems := load(t, file, map[string]string{"POLIGON_MCP_SEE_ALWAYS": tc.v, "POLIGON_DRY_RUN": tc.v})
		named := false
		for _, p := range problems {
			named = named || strings.Contains(p.Error(), `POLIGON_MCP_SEE_ALWAYS="`+tc.v+`" is not a boolean`)
		}
		if named != tc.problem || c.Vision.SeeAlways != tc.want {
			t.Errorf("%q: see_always %v, problems %v", tc.v, c.Vision.SeeAlways, problems)
		}
		if dry := tc.want && tc.v != ""; c.DryRun != (dry && !tc.problem) {
			t.Errorf("POLIGON_DRY_RUN=%q: dry run %v", tc.v, c.DryRun)
		}
	}
}
