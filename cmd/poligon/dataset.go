package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/poligon/poligon/internal/dataset"
)

const datasetUsage = `usage: poligon dataset export --dataset DIR --out DIR [flags]

Turns a training-dataset capture (POLIGON_MCP_DATASET) into a training set: the shots that pass
every rule with their PNG, AT-SPI and OCR files, train.jsonl and val.jsonl (split by session) and
report.json (what went out, what was skipped and why). The set is built beside --out and swapped
in whole: an interrupted or failed export leaves the previous one as it was.

  --dataset DIR       the capture directory (index.jsonl and the session directories)
  --out DIR           where the training set goes
  --tar FILE          also pack it into FILE (.tar.gz or .tgz: gzipped)
  --require-atspi     skip shots without a usable AT-SPI dump (default: keep them on their OCR)
  --clicks-only       keep clicks and drags only
  --locale L,...      keep these languages only (ru and ru_RU.UTF-8 are one)
  --theme T,...       keep these themes only
  --app A,...         keep these applications only
  --seed N            the session split's seed (default 1)
  --val-fraction F    the share of sessions for validation, 0 <= F < 1 (default 0.1)
  --eval DIR          the benchmark whose sessions and screens stay out (default holo2-eval)
  --no-eval           export without the benchmark check (report.json says so)
  --force             replace a previous export (never the capture, the benchmark or a directory holding them)
  --dry-run           print report.json and write nothing
`

// datasetCmd: poligon dataset export ..., the training-set exporter.
func datasetCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "export" {
		fmt.Fprint(stderr, datasetUsage)
		return exitError(2)
	}
	fs := flag.NewFlagSet("dataset export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, datasetUsage) }
	var o dataset.Options
	var locale, theme, app stringList
	fs.StringVar(&o.Dataset, "dataset", "", "the capture directory")
	fs.StringVar(&o.Out, "out", "", "where the training set goes")
	fs.StringVar(&o.Tar, "tar", "", "also pack it into this file")
	fs.BoolVar(&o.RequireATSPI, "require-atspi", false, "skip shots without a usable AT-SPI dump")
	fs.BoolVar(&o.ClicksOnly, "clicks-only", false, "keep clicks and drags only")
	fs.Var(&locale, "locale", "keep these languages only")
	fs.Var(&theme, "theme", "keep these themes only")
	fs.Var(&app, "app", "keep these applications only")
	fs.Int64Var(&o.Seed, "seed", 1, "the session split's seed")
	fs.Float64Var(&o.ValFraction, "val-fraction", 0.1, "the share of sessions for validation")
	fs.StringVar(&o.Eval, "eval", "", "the benchmark directory (default holo2-eval)")
	fs.BoolVar(&o.NoEval, "no-eval", false, "export without the benchmark check")
	fs.BoolVar(&o.Force, "force", false, "replace a previous export")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the report and write nothing")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return exitError(2)
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "error: unexpected argument %q\nhint: every input is a flag: poligon dataset export --dataset DIR --out DIR\n", pos[0])
		return exitError(2)
	}
	o.Locale, o.Theme, o.App = splitList(locale), splitList(theme), splitList(app)
	if !o.NoEval && o.Eval == "" {
		o.Eval = "holo2-eval"
	}
	// Ctrl-C stops the export; the previous one stays as it was.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.Progress = progressPrinter(stderr, 2*time.Second)

	rep, err := dataset.Export(ctx, o)
	var refused *dataset.Error
	switch {
	case errors.As(err, &refused):
		fmt.Fprintf(stderr, "error: %s\nhint: %s\n", refused.Message, refused.Advice)
		return exitError(1)
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "error: export interrupted\nhint: nothing was swapped in: a previous export in --out is as it was; run again to export")
		return exitError(1)
	case err != nil:
		return err
	}
	if o.DryRun {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	fmt.Fprint(stdout, exportSummary(rep))
	return nil
}

// splitList flattens repeated and comma-separated values.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// progressPrinter says how far the export is, at most once per interval.
func progressPrinter(w io.Writer, every time.Duration) func(done, total int) {
	var mu sync.Mutex
	last := time.Now()
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) >= every {
			last = time.Now()
			fmt.Fprintf(w, "dataset export: %d of %d index lines checked\n", done, total)
		}
	}
}

// exportSummary is what an export prints: the counts, the skips by code,
// the warnings, where the report is.
func exportSummary(rep *dataset.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exported %d of %d index lines to %s: train %d frames in %d sessions, val %d frames in %d sessions; %d with an AT-SPI dump, %d with OCR; eval check: %s\n",
		rep.Exported, rep.Lines, rep.Out, rep.Train.Frames, rep.Train.Sessions, rep.Val.Frames, rep.Val.Sessions, rep.WithATSPI, rep.WithOCR, rep.EvalCheck)
	if rep.Tar != "" {
		fmt.Fprintf(&b, "tar: %s\n", rep.Tar)
	}
	codes := make([]string, 0, len(rep.Skipped))
	for code := range rep.Skipped {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	for _, code := range codes {
		fmt.Fprintf(&b, "skipped %s: %d\n", code, rep.Skipped[code])
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	fmt.Fprintf(&b, "report: %s/%s\n", rep.Out, dataset.ReportName)
	return b.String()
}
