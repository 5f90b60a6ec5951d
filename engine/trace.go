package engine

import (
	"context"
	"encoding/json"
	"image"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/trace"
)

// Every tool call that reached a bench is a trace step (internal/trace):
// the audit record's fields, the MCP session it came in, and for a tool on
// the screen the frames before and after it. The frames are pixels the
// call's machinery already took; encoding them is the recorder's, off the
// call's path.

// callTrace is what the step is made of beyond the audit record.
type callTrace struct {
	who    *hostapi.Caller
	obs    *hostapi.Observation
	scope  trace.Scope
	before *image.RGBA
	start  time.Time
}

// observe starts the call's step: its scope rides in ctx to the scripts it
// runs, and the VMs it holds are noted.
func (s *Server) observe(ctx context.Context, t *Tool, who *hostapi.Caller, req *mcp.CallToolRequest, rec *callRecord) context.Context {
	if s.app.Trace == nil || who == nil {
		return ctx
	}
	ct := &rec.trace
	ct.who, ct.start = who, time.Now()
	ct.scope = trace.Scope{Bench: rec.Bench, Caller: rec.Caller, Source: trace.SourceMCP}
	if req.Session != nil {
		ct.scope.Session = req.Session.ID()
	}
	if t.Screen && rec.VMID != 0 {
		if f, ok := who.LastFrame(rec.VMID); ok {
			ct.before = f.Image
		}
	}
	ctx, ct.obs = hostapi.Observe(ctx)
	return trace.WithScope(ctx, ct.scope)
}

// traceCall records the finished call.
func (s *Server) traceCall(rec *callRecord, t *Tool, res *mcp.CallToolResult) {
	ct := rec.trace
	if ct.who == nil {
		return
	}
	step := ct.scope.Step()
	step.At, step.Took, step.Req = ct.start, time.Since(ct.start), rec.Req
	step.Owner, step.VMID, step.Call, step.Outcome, step.Error = rec.Owner, rec.VMID, t.Name, rec.Outcome, rec.Error
	step.Args, _ = json.Marshal(rec.Args) // the audit log's redaction
	var held *hostapi.Watched
	if vms := ct.obs.VMs(); len(vms) > 0 {
		held = vms[0]
		step.VM = held.VM().Name
		if step.VMID == 0 {
			step.VMID = held.VM().VMID
		}
	}
	if res != nil && !res.IsError {
		switch t.Reads {
		case "text":
			step.Text = allText(res)
		case "elements":
			step.Elements = allText(res)
		}
	}
	if !t.Screen || step.VMID == 0 {
		s.app.Trace.Record(step, nil, nil)
		return
	}
	// The frame after: one the call took itself (an answer's screenshot, a
	// settle), else the screen a moment after it, off its path.
	if f, ok := ct.who.LastFrame(step.VMID); ok && f.At.After(ct.start) {
		s.app.Trace.Record(step, ct.before, f.Image)
		return
	}
	if held == nil {
		s.app.Trace.Record(step, ct.before, nil)
		return
	}
	req := rec.Req
	s.app.Trace.RecordAfter(step, ct.before, trace.GlanceAfter, func() *image.RGBA {
		ctx, cancel := context.WithTimeout(logs.WithReq(context.Background(), req), 5*time.Second)
		defer cancel()
		f, err := held.Frame(ctx)
		if err != nil {
			return nil
		}
		return f.Image
	})
}
