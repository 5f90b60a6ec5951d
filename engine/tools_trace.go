package engine

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/trace"
)

// The trace tools: every call on a machine is a trace step (engine/trace.go
// records a tool call's; the catalog a script's host calls); trace_export
// writes a selection out for a bug report.

type traceExportArgs struct {
	VMID    int    `json:"vmid,omitempty" min:"1"`
	Stand   string `json:"stand,omitempty"`
	Session string `json:"session,omitempty" desc:"an MCP session id; this: this call's"`
	Since   string `json:"since,omitempty" desc:"RFC 3339, or how long ago (90m)"`
	Until   string `json:"until,omitempty" desc:"RFC 3339, or how long ago"`
	Format  string `json:"format,omitempty" desc:"zip: steps.json, PNGs and the page" enum:"html,zip" default:"html"`
}

func traceTools() []*Tool {
	return []*Tool{
		newTool(Def{Name: "trace_export", Toolset: "trace", Title: "Export a trace",
			Description: "Write the trace of your calls on a VM, a stand, a session or since a time (each step with its screen before and after) as one HTML page or a zip under the evidence directory: answers its path.",
			Summary:     "The trace of a VM, stand, session or time range as one self-contained HTML page (or a zip) under the evidence directory",
			Effect:      additive("writes a new file in the evidence directory; changes no machine")}, traceExport),
	}
}

func traceExport(ctx context.Context, c *Call, in *traceExportArgs) (*mcp.CallToolResult, error) {
	sel := trace.Selection{VMID: in.VMID, Stand: in.Stand, Session: in.Session, Since: in.Since, Until: in.Until}
	if in.Session == "this" {
		if c.Request == nil || c.Request.Session == nil {
			return nil, hostapi.Failf("name the session by its id", "this call has no MCP session")
		}
		sel.Session = c.Request.Session.ID()
	}
	q, scope, err := sel.Query(time.Now())
	if errors.Is(err, trace.ErrNoSelection) {
		return nil, hostapi.Failf("pass vmid, stand, session or since", "which trace: %v", err)
	}
	if err != nil {
		return nil, hostapi.Failf("since and until take an RFC 3339 time or a duration back from now", "%v", err)
	}
	e, err := c.Server.app.TraceExport(ctx, c.Caller, c.Bench, q, "poligon trace: "+scope)
	if err != nil {
		return nil, err
	}
	format := in.Format
	if format == "" {
		format = "html"
	}
	var buf bytes.Buffer
	if format == "zip" {
		err = e.Zip(&buf)
	} else {
		err = e.HTML(&buf)
	}
	if err != nil {
		return nil, err
	}
	name := trace.FileName(scope, time.Now(), format)
	saved, err := hostapi.SaveEvidence(c.Server.app.Config.EvidenceDir, name, buf.Bytes())
	if err != nil {
		return nil, err
	}
	failed := 0
	for _, s := range e.Steps {
		if s.Outcome != "ok" {
			failed++
		}
	}
	return text("saved %s under the evidence directory: %d steps (%d failed), %d KB", saved, len(e.Steps), failed, buf.Len()/1024), nil
}
