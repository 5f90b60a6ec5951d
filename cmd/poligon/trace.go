package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/poligon/poligon/internal/trace"
	"github.com/poligon/poligon/runtime/transcript"
)

const traceUsage = `usage: poligon trace export (--vm N | --stand S | --session ID | --since T) [--until T] [--bench B] [--zip] --out FILE
       poligon trace export --transcript FILE --out FILE

  export   write your trace (every call on a VM, a stand, an MCP session, or since a time) as one HTML page that
           opens from disk with each step's screen before and after, or with --zip as steps.json, the frames as
           PNGs and the page; --transcript writes a script run's transcript the same way (it kept no frames).
           T is an RFC 3339 time or how long ago (90m, 2h).
`

// traceCmd: poligon trace export ..., trace_export at a terminal.
func traceCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, rest, fs, cf, ok := verbFlags("trace", traceUsage, args, stderr)
	if !ok {
		return exitError(2)
	}
	vm := fs.Int("vm", 0, "the steps on this VM")
	standName := fs.String("stand", "", "the steps of a stand")
	session := fs.String("session", "", "the steps of an MCP session")
	since := fs.String("since", "", "from this time (RFC 3339) or this long ago (90m)")
	until := fs.String("until", "", "until this time or this long ago")
	bench := fs.String("bench", "", "the bench (default: the config's default)")
	zipped := fs.Bool("zip", false, "a zip of steps.json, the frames and the page, not one page")
	out := fs.String("out", "", "the file to write")
	tr := fs.String("transcript", "", "a script run's transcript to write as a trace")
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		return exitError(2)
	}
	if verb != "export" || len(pos) != 0 || *out == "" {
		fs.Usage()
		return exitError(2)
	}
	var e trace.Export
	if *tr != "" {
		if e, err = transcriptExport(*tr); err != nil {
			return printToolError(stderr, err)
		}
	} else {
		cfg, err := cf.load(stderr)
		if err != nil {
			return err
		}
		a, err := openApp(ctx, cfg, newLogger(stderr, "warn"))
		if err != nil {
			return err
		}
		defer a.Close()
		who, benchName, err := ownerOn(ctx, a, *bench)
		if err != nil {
			return printToolError(stderr, err)
		}
		sel := trace.Selection{VMID: *vm, Stand: *standName, Session: *session, Since: *since, Until: *until}
		q, scope, err := sel.Query(time.Now())
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			fs.Usage()
			return exitError(2)
		}
		if e, err = a.TraceExport(ctx, who, benchName, q, "poligon trace: "+scope); err != nil {
			return printToolError(stderr, err)
		}
	}
	var buf bytes.Buffer
	if *zipped {
		err = e.Zip(&buf)
	} else {
		err = e.HTML(&buf)
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d steps, %d KB\n", *out, len(e.Steps), buf.Len()/1024)
	return nil
}

// transcriptExport reads a transcript as a trace.
func transcriptExport(path string) (trace.Export, error) {
	f, err := os.Open(path)
	if err != nil {
		return trace.Export{}, err
	}
	defer f.Close()
	h, entries, err := transcript.Read(f)
	if err != nil {
		return trace.Export{}, err
	}
	return trace.Export{Title: fmt.Sprintf("poligon transcript: %s on vmid %d", h.Script, h.VMID), Steps: trace.FromTranscript(h, entries)}, nil
}
