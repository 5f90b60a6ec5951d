package app

import (
	"context"
	"sort"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/trace"
)

// Who may read a trace: a VM's steps are its owner's; on a physical bench,
// the caller who holds its lease also reads every step of the bench since
// the lease began (the machine is theirs for now; the holders' before them
// are not). Every door reads traces through these.

// TraceSteps answers the steps q selects that who may read on bench.
func (a *App) TraceSteps(ctx context.Context, who *hostapi.Caller, bench string, q trace.Query) ([]trace.Step, error) {
	if a.Trace == nil {
		return nil, hostapi.Failf("set state_dir (the trace lives in its store) and leave [trace] disabled off", "this server keeps no trace")
	}
	q.Bench, q.Owner, q.OthersSince = bench, who.Owner(), time.Time{}
	if l, ok := a.heldLease(ctx, who); ok {
		q.OthersSince = l.Since
	}
	return a.Trace.Steps(ctx, q)
}

// TraceFrame answers a frame's PNG, when a step who may read shows it.
func (a *App) TraceFrame(ctx context.Context, who *hostapi.Caller, bench, digest string) ([]byte, error) {
	steps, err := a.TraceSteps(ctx, who, bench, trace.Query{Frame: digest, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, hostapi.Failf("a trace's frames are its steps'", "no frame %s in your trace", digest)
	}
	return a.Trace.Frame(digest)
}

// heldLease answers the lease of who's bench, a physical machine, when who
// holds it.
func (a *App) heldLease(ctx context.Context, who *hostapi.Caller) (hostapi.Lease, bool) {
	l, err := who.BenchLease(ctx)
	if err != nil || l == nil || l.Holder != who.Owner() {
		return hostapi.Lease{}, false
	}
	return *l, true
}

// TraceExport is a trace written out for a bug report: the steps who may
// read that q selects, with their frames.
func (a *App) TraceExport(ctx context.Context, who *hostapi.Caller, bench string, q trace.Query, title string) (trace.Export, error) {
	if q.Limit <= 0 {
		q.Limit = maxExportSteps
	}
	steps, err := a.TraceSteps(ctx, who, bench, q)
	if err != nil {
		return trace.Export{}, err
	}
	if len(steps) == 0 {
		return trace.Export{}, hostapi.Failf("widen the selection (another vmid, stand, session or time), or make a call first", "no steps of yours in the trace for %s", title)
	}
	// By when each call began: a step whose frame after is a glance is
	// stored a moment after the steps that followed it.
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].At.Before(steps[j].At) })
	return trace.Export{Title: title, Steps: steps, Frame: a.Trace.Frame}, nil
}

// maxExportSteps bounds one export (a bug report, not an archive).
const maxExportSteps = 5000
