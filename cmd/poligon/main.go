// Command poligon is the MCP server and CLI of poligon: disposable machines
// to reproduce bugs on.
//
//	poligon serve [--stdio | --bind ADDR]     MCP over stdio or Streamable HTTP (and the browser views at /ui/)
//	poligon ui [--bind 127.0.0.1:8812]        the browser views on loopback, with a one-time login link
//	poligon run SCRIPT (--vm N | --template T) [--param k=v ...]
//	poligon check DIR                          validate scripts
//	poligon replay TRANSCRIPT                  re-run a script against a recorded run
//	poligon config check                       the effective config, secrets masked
//	poligon doctor                             check this host before starting the service
//	poligon image NAME                         build a template from Debian packages
//	poligon bench status|lease|power|media ... the physical benches' tools
//	poligon stand plan|apply|status|destroy|compile  multi-machine stands
//	poligon dataset export --dataset DIR --out DIR   a training set from a capture
//	poligon version
//	poligon --healthcheck URL                  exit 0 when URL answers 2xx
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

const usage = `poligon: disposable machines to reproduce bugs on, for agents and QA engineers.

Usage:
  poligon serve [--stdio | --bind ADDR] [flags]   serve the MCP tools (stdio, or Streamable HTTP at /mcp; browser views at /ui/)
  poligon ui [--bind 127.0.0.1:8812]              the browser views on loopback; prints a one-time login link
  poligon run SCRIPT (--vm N | --template T) [--param k=v ...] [--bench B]
                                                  run a script from a terminal, with a live step log
  poligon check DIR                               validate the scripts in DIR
  poligon replay TRANSCRIPT                       re-run a script against a recorded run, no machine needed
  poligon config check                            print the effective config (secrets masked) and its problems
  poligon doctor [--timeout 10s]                  check this host: QEMU, OCR, directories, benches, certificates
  poligon image NAME [DATA_DIR]                   build a template from Debian packages (tiny, tiny-x, debian, debian-desktop)
  poligon bench status|lease|release|power|media  physical benches: leases, power, virtual media
  poligon stand plan|apply|status|destroy|compile stands: several machines built from a plan
  poligon dataset export --dataset DIR --out DIR  a training set from a dataset capture (report.json says what went out)
  poligon trace export (--vm N | --stand S | ...) --out FILE
                                                  the trace of your calls as one HTML page (or a zip) for a bug report
  poligon version                                 print the version
  poligon --healthcheck URL                       exit 0 when URL answers 2xx (container health checks)

Every command takes --config FILE (default $XDG_CONFIG_HOME/poligon/config.toml).
Run "poligon COMMAND -h" for a command's flags.
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries an exit code; its message has been printed already.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit %d", int(e)) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "--healthcheck", "-healthcheck":
		err = healthcheck(rest, stderr)
	case "serve":
		err = serve(ctx, rest, stdout, stderr)
	case "ui":
		err = ui(ctx, rest, stdout, stderr)
	case "run":
		err = runScript(ctx, rest, stdout, stderr)
	case "check":
		err = checkScripts(ctx, rest, stdout, stderr)
	case "replay":
		err = replay(ctx, rest, stdout, stderr)
	case "config":
		err = configCmd(rest, stdout, stderr)
	case "doctor":
		err = doctor(ctx, rest, stdout, stderr)
	case "image":
		err = image(ctx, rest, stdout, stderr)
	case "bench":
		err = benchCmd(ctx, rest, stdout, stderr)
	case "stand":
		err = standCmd(ctx, rest, stdout, stderr)
	case "dataset":
		err = datasetCmd(ctx, rest, stdout, stderr)
	case "trace":
		err = traceCmd(ctx, rest, stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "error: unknown command %q\nhint: poligon help lists the commands\n", cmd)
		return 2
	}
	var code exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
}
