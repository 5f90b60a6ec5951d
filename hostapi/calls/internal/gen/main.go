// Command gen writes what scripts see of the host calls from
// hostapi/calls.Registry: the call table of runtime/js/prelude.js, the
// answer types and VM verbs of stdlib/poligon.d.ts, and the Go SDK's
// stdlib/go/poligon/calls_gen.go. Run it with
//
//	go generate ./hostapi/calls
//
// Its test fails when a checked-in file differs from what it would write.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/poligon/poligon/hostapi/calls"
)

// The files gen writes, relative to the module root.
const (
	preludeFile = "runtime/js/prelude.js"
	dtsFile     = "stdlib/poligon.d.ts"
	sdkFile     = "stdlib/go/poligon/calls_gen.go"
)

func main() {
	root, err := moduleRoot()
	if err == nil {
		err = write(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// write regenerates the files under root, touching only those that change.
func write(root string) error {
	files, err := generate(root, calls.Registry)
	if err != nil {
		return err
	}
	for _, name := range []string{preludeFile, dtsFile, sdkFile} {
		path := filepath.Join(root, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, files[name]) {
			continue
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return err
		}
		fmt.Println("gen: wrote", name)
	}
	return nil
}

// generate answers the contents every generated file should have, by its
// path relative to root; the hand-written parts come from the files there.
func generate(root string, registry []calls.Call) (map[string][]byte, error) {
	m, err := load(root, registry)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}

	prelude, err := os.ReadFile(filepath.Join(root, preludeFile))
	if err != nil {
		return nil, err
	}
	js, err := splice(string(prelude), "verbs", m.jsVerbs())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", preludeFile, err)
	}
	files[preludeFile] = []byte(js)

	decl, err := os.ReadFile(filepath.Join(root, dtsFile))
	if err != nil {
		return nil, err
	}
	d := m.dts()
	verbs := d.verbs() // before types: rendering the verbs sees every type they name
	ts, err := splice(string(decl), "types", d.types())
	if err == nil {
		ts, err = splice(ts, "verbs", verbs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dtsFile, err)
	}
	files[dtsFile] = []byte(ts)

	if files[sdkFile], err = m.sdk(); err != nil {
		return nil, fmt.Errorf("%s: %w", sdkFile, err)
	}
	return files, nil
}

// moduleRoot is the directory of the go.mod above the working directory
// (go generate runs gen in hostapi/calls, go test in its own directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
