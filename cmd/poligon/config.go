package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/poligon/poligon/backends/qemu"
	"github.com/poligon/poligon/config"
	"github.com/poligon/poligon/engine"
	"github.com/poligon/poligon/images"
)

// configCmd: poligon config check — the effective config with secrets
// masked, and every problem found (exit 2 when there is one).
func configCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "error: want: poligon config check [--config FILE]")
		return exitError(2)
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return exitError(2)
	}
	path, explicit := cf.path, cf.path != ""
	if !explicit {
		path = config.DefaultPath()
	}
	cfg, problems := config.Load(path, explicit, nil)
	if cfg.File != "" {
		fmt.Fprintf(stdout, "# config file: %s\n", cfg.File)
	} else {
		fmt.Fprintf(stdout, "# no config file (%s): defaults and environment\n", path)
	}
	for name, src := range cfg.Source {
		fmt.Fprintf(stdout, "# %s from the %s\n", name, src)
	}
	// Secret fields marshal as "***".
	if err := toml.NewEncoder(stdout).Encode(cfg); err != nil {
		return err
	}
	problems = append(problems, printAccels(stdout, cfg)...)
	if len(problems) == 0 {
		fmt.Fprintln(stdout, "# ok: no problems")
		return nil
	}
	for _, p := range problems {
		fmt.Fprintf(stderr, "error: %v\n", p)
	}
	return exitError(2)
}

// printAccels prints the accelerator each qemu bench gets, running the KVM
// probe as the server would at start (once: the benches share the binary),
// so a /dev/kvm that opens but cannot run a guest shows up here. A kvm
// that cannot be had is a problem.
func printAccels(w io.Writer, cfg *config.Config) []error {
	var problems []error
	for _, b := range cfg.Benches {
		switch {
		case b.Type != "qemu":
			continue
		case b.Accel != qemu.AccelAuto && b.Accel != qemu.AccelKVM && b.Accel != qemu.AccelTCG:
			continue // config.Check reported it
		}
		a, err := qemu.ResolveAccel("", b.Accel)
		if err != nil {
			problems = append(problems, fmt.Errorf("bench %q: %w", b.Name, err))
			continue
		}
		fmt.Fprintf(w, "# bench %q: accel %s\n", b.Name, a)
	}
	return problems
}

// image builds a template: poligon image NAME [DATA_DIR]. The recipes are
// the ones embedded in this binary, written to the user's cache directory
// first, so it works without the source tree.
func image(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := images.Names()
	if len(args) == 0 || !slices.Contains(names, args[0]) {
		fmt.Fprintf(stderr, "error: want: poligon image %s [DATA_DIR]\nhint: tiny is a shell and qemu-ga; tiny-x adds an X11 desktop; debian is Debian 12 on a disk and debian-desktop adds XFCE and lightdm (both built as root); all are built from Debian packages\n", strings.Join(names, "|"))
		return exitError(2)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return fmt.Errorf("%w\nhint: set XDG_CACHE_HOME (or HOME): the build recipes are written there", err)
	}
	script, err := images.Extract(filepath.Join(cache, "poligon", "recipes"), args[0])
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, script, args[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd.Run()
}

func versionLine() string {
	b := engine.BuildInfo()
	return fmt.Sprintf("poligon %s commit %s clean %v", b.Version, b.Commit, b.Clean)
}
