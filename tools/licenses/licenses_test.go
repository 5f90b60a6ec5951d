package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// moduleFile is a license file of a module this project requires, from the
// module cache (go.sum pins the version, so the text is the real one).
func moduleFile(t *testing.T, mod, name string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("module %s is not in the module cache (run go mod download): %v", mod, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// systemLicense is one of Debian's copies of the common license texts.
func systemLicense(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/usr/share/common-licenses", name))
	if err != nil {
		t.Skipf("no /usr/share/common-licenses/%s (Debian's base-files has it): %v", name, err)
	}
	return string(b)
}

func TestClassifyModuleCache(t *testing.T) {
	for _, c := range []struct{ mod, file, want string }{
		{"github.com/BurntSushi/toml", "COPYING", "MIT"},
		{"github.com/hashicorp/errwrap", "LICENSE", "MPL-2.0"},
		{"golang.org/x/sys", "LICENSE", "BSD-3-Clause"},
		{"github.com/gorilla/websocket", "LICENSE", "BSD-2-Clause"},
		{"github.com/tetratelabs/wazero", "LICENSE", "Apache-2.0"},
		{"modernc.org/sqlite", "LICENSE-SQLITE", "Public-Domain"},
		{"github.com/cespare/xxhash/v2", "LICENSE.txt", "MIT"},
	} {
		got := Classify(moduleFile(t, c.mod, c.file))
		if !slices.Equal(got, []string{c.want}) {
			t.Errorf("%s %s = %v, want %s", c.mod, c.file, got, c.want)
		}
	}
}

func TestClassifyCommonLicenses(t *testing.T) {
	for file, want := range map[string]string{
		"GPL-2": "GPL-2.0", "GPL-3": "GPL-3.0", "LGPL-2.1": "LGPL-2.1", "LGPL-3": "LGPL-3.0",
		"Apache-2.0": "Apache-2.0", "MPL-2.0": "MPL-2.0", "BSD": "BSD-3-Clause", "CC0-1.0": "CC0-1.0",
	} {
		if got := Classify(systemLicense(t, file)); !slices.Equal(got, []string{want}) {
			t.Errorf("/usr/share/common-licenses/%s = %v, want %s", file, got, want)
		}
	}
	// A README is no license.
	if got := Classify("# toml\nA TOML parser for Go.\n"); len(got) != 0 {
		t.Errorf("a README classified as %v", got)
	}
}

// fakeModule lays out a module in a module cache of its own.
func fakeModule(t *testing.T, cache, path, version string, files map[string]string) Module {
	t.Helper()
	dir := filepath.Join(cache, escape(path)+"@"+version)
	os.MkdirAll(dir, 0o755)
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Module{Path: path, Version: version}
}

func TestCheckRefuses(t *testing.T) {
	cache := t.TempDir()
	mit := moduleFile(t, "github.com/BurntSushi/toml", "COPYING")
	gpl := systemLicense(t, "GPL-3")
	mods := []Module{
		fakeModule(t, cache, "example.org/Good", "v1.0.0", map[string]string{"LICENSE": mit}),
		fakeModule(t, cache, "example.org/copyleft", "v1.0.0", map[string]string{"COPYING": gpl}),
		fakeModule(t, cache, "example.org/bare", "v0.1.0", map[string]string{"README.md": "no license here"}),
		fakeModule(t, cache, "example.org/odd", "v0.1.0", map[string]string{"LICENSE": "All rights reserved."}),
		{Path: "example.org/absent", Version: "v1.0.0"},
	}
	allowed, err := readAllowed("allowed.txt")
	if err != nil {
		t.Fatal(err)
	}
	res := Check(mods, cache, "", allowed)
	want := []string{
		"ok   example.org/Good@v1.0.0 MIT (LICENSE)",
		"FAIL example.org/copyleft@v1.0.0: license GPL-3.0 is not allowed",
		"FAIL example.org/bare@v0.1.0: no LICENSE or COPYING file",
		"FAIL example.org/odd@v0.1.0: license file LICENSE is of no license this check knows",
		"FAIL example.org/absent@v1.0.0: not in the module cache",
	}
	for i, r := range res {
		if !strings.HasPrefix(r.String(), want[i]) {
			t.Errorf("result %d = %q, want %q...", i, r, want[i])
		}
	}
}

func TestAllowedListIsKnown(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "allowed.txt")
	os.WriteFile(bad, []byte("MIT\nApache2\n"), 0o644)
	if _, err := readAllowed(bad); err == nil || !strings.Contains(err.Error(), `"Apache2" is no license id`) {
		t.Errorf("a typo in the allow-list: %v", err)
	}
}

// TestPoligonBinary runs the check the image build runs, on poligon itself.
func TestPoligonBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds poligon: not in -short")
	}
	bin := filepath.Join(t.TempDir(), "poligon")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/poligon").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-allowed", "allowed.txt", bin}, &stdout, &stderr); code != 0 {
		t.Fatalf("licenses of poligon: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"ok   github.com/modelcontextprotocol/go-sdk@", "ok   modernc.org/sqlite@", "ok   std@go"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
