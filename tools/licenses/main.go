// Command licenses checks the license of every Go module a binary links
// against the project's allow-list, reading the license files from the
// module cache (no network service):
//
//	go run ./tools/licenses [-allowed tools/licenses/allowed.txt] bin/poligon
//
// It prints one line per module (and the Go toolchain, whose standard
// library every binary links) and exits 1 when a license is not allowed
// or no license file is found, naming the module and the license.
package main

import (
	"bufio"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("licenses", flag.ContinueOnError)
	fs.SetOutput(stderr)
	allowedFile := fs.String("allowed", "tools/licenses/allowed.txt", "the accepted licenses, one SPDX id a line")
	modcache := fs.String("modcache", "", "the module cache (default: go env GOMODCACHE)")
	goroot := fs.String("goroot", "", "the Go toolchain the binary was built with (default: go env GOROOT)")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: licenses [-allowed FILE] BINARY...")
		return 2
	}
	allowed, err := readAllowed(*allowedFile)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 2
	}
	if *modcache == "" {
		*modcache = goEnv("GOMODCACHE")
	}
	if *goroot == "" {
		*goroot = goEnv("GOROOT")
	}
	failed := 0
	for _, bin := range fs.Args() {
		mods, err := Modules(bin)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\nhint: give a Go binary built with module support\n", err)
			return 2
		}
		results := Check(mods, *modcache, *goroot, allowed)
		for _, r := range results {
			fmt.Fprintln(stdout, r)
			if r.Err != nil {
				failed++
			}
		}
		fmt.Fprintf(stdout, "%s: %d modules, %d refused\n", bin, len(results), failed)
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "error: %d modules have a license the project has not accepted (or none found)\n", failed)
		fmt.Fprintf(stderr, "hint: drop or replace the module, or add its license to %s after a review\n", *allowedFile)
		return 1
	}
	return 0
}

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// knownIDs are the ids Classify can answer: an allow-list line outside them
// is a typo.
func knownIDs() []string {
	var ids []string
	for _, m := range markers {
		ids = append(ids, m.id)
	}
	return ids
}

// readAllowed reads the allow-list: one license id a line, # comments.
func readAllowed(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("allow-list: %w", err)
	}
	defer f.Close()
	known := knownIDs()
	allowed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if !slices.Contains(known, line) {
			return nil, fmt.Errorf("%s:%d: %q is no license id this check knows (%s)", path, n, line, strings.Join(known, ", "))
		}
		allowed[line] = true
	}
	return allowed, sc.Err()
}

// Module is one module a binary links.
type Module struct {
	Path, Version string
	Dir           string // a local replacement's directory, else ""
}

// Modules reads the modules a Go binary links from its build info (what
// `go version -m` prints).
func Modules(bin string) ([]Module, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var mods []Module
	for _, d := range info.Deps {
		m := Module{Path: d.Path, Version: d.Version}
		if r := d.Replace; r != nil {
			m.Path, m.Version = r.Path, r.Version
			if r.Version == "" { // a directory on disk
				m.Dir = r.Path
			}
		}
		mods = append(mods, m)
	}
	mods = append(mods, Module{Path: "std", Version: info.GoVersion})
	return mods, nil
}

// Result is one module's verdict.
type Result struct {
	Module   Module
	Licenses []string
	Files    []string
	Err      error
}

func (r Result) String() string {
	name := r.Module.Path + "@" + r.Module.Version
	if r.Err != nil {
		return fmt.Sprintf("FAIL %s: %v", name, r.Err)
	}
	return fmt.Sprintf("ok   %s %s (%s)", name, strings.Join(r.Licenses, " AND "), strings.Join(r.Files, ", "))
}

// Check classifies each module's license files and holds them to allowed.
func Check(mods []Module, modcache, goroot string, allowed map[string]bool) []Result {
	var out []Result
	for _, m := range mods {
		r := Result{Module: m}
		dir := m.Dir
		switch {
		case m.Path == "std":
			dir = goroot
		case dir == "":
			var err error
			if dir, err = moduleDir(modcache, m); err != nil {
				r.Err = err
				out = append(out, r)
				continue
			}
		}
		r.Licenses, r.Files, r.Err = licensesIn(dir)
		if r.Err == nil {
			var refused []string
			for _, l := range r.Licenses {
				if !allowed[l] {
					refused = append(refused, l)
				}
			}
			if len(refused) > 0 {
				r.Err = fmt.Errorf("license %s is not allowed (tools/licenses/allowed.txt; files: %s)", strings.Join(refused, ", "), strings.Join(r.Files, ", "))
			}
		}
		out = append(out, r)
	}
	return out
}

// moduleDir is where the module cache keeps a module's files.
func moduleDir(modcache string, m Module) (string, error) {
	dir := filepath.Join(modcache, escape(m.Path)+"@"+escape(m.Version))
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("not in the module cache %s: run go mod download first", modcache)
	}
	return dir, nil
}

// escape is the module cache's case encoding: an upper-case letter is "!"
// and its lower case (github.com/BurntSushi -> github.com/!burnt!sushi).
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

var (
	// The module's own license: LICENSE, LICENSE.txt, COPYING, License.md...
	mainName = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)(\.(txt|md|rst))?$`)
	// More license files beside it: LICENSE-SQLITE, LICENSE.libyaml, COPYING.LIB...
	extraName = regexp.MustCompile(`(?i)^(licen[cs]e|copying)[-_.].+`)
)

// licensesIn classifies a module's license files: its own license file
// must be recognised; further files add what they hold (a file that is a
// notice or an attribution without a license text adds nothing).
func licensesIn(dir string) (licenses, files []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	found := map[string]bool{}
	mains := 0
	for _, e := range entries {
		name := e.Name()
		isMain := mainName.MatchString(name)
		if e.IsDir() || !isMain && !extraName.MatchString(name) {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, err
		}
		ids := Classify(string(text))
		if isMain {
			mains++
			if len(ids) == 0 {
				return nil, nil, fmt.Errorf("license file %s is of no license this check knows: read it and extend tools/licenses/classify.go", name)
			}
		}
		if len(ids) > 0 {
			files = append(files, name)
		}
		for _, id := range ids {
			found[id] = true
		}
	}
	if mains == 0 && len(found) == 0 {
		return nil, nil, errors.New("no LICENSE or COPYING file in the module: its license is unknown")
	}
	for id := range found {
		licenses = append(licenses, id)
	}
	slices.Sort(licenses)
	return licenses, files, nil
}
