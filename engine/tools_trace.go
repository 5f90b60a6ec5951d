package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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
	q, scope, err := traceQuery(in, c)
	if err != nil {
		return nil, err
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

// traceQuery reads the selection; at least one of vmid, stand, session or
// since names it. scope names the file.
func traceQuery(in *traceExportArgs, c *Call) (trace.Query, string, error) {
	q := trace.Query{VMID: in.VMID, Stand: in.Stand, Session: in.Session}
	var parts []string
	if in.VMID != 0 {
		parts = append(parts, fmt.Sprintf("vm%d", in.VMID))
	}
	if in.Stand != "" {
		parts = append(parts, "stand-"+in.Stand)
	}
	if in.Session == "this" {
		if c.Request == nil || c.Request.Session == nil {
			return q, "", hostapi.Failf("name the session by its id", "this call has no MCP session")
		}
		q.Session = c.Request.Session.ID()
	}
	if q.Session != "" {
		parts = append(parts, "session")
	}
	var err error
	if q.Since, err = traceTime(in.Since, "since"); err != nil {
		return q, "", err
	}
	if q.Until, err = traceTime(in.Until, "until"); err != nil {
		return q, "", err
	}
	if !q.Since.IsZero() {
		parts = append(parts, "since-"+q.Since.UTC().Format("0102-1504"))
	}
	if len(parts) == 0 {
		return q, "", hostapi.Failf("pass vmid, stand, session or since", "which trace: nothing selects its steps")
	}
	return q, strings.Join(parts, "-"), nil
}

// traceTime reads an RFC 3339 time or a duration back from now.
func traceTime(s, what string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, hostapi.Failf("an RFC 3339 time (2026-12-04T10:15:00Z) or a duration (90m)", "%s %q is neither a time nor a duration", what, s)
}
