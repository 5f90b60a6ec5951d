package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
)

// Tool is data: a definition the client lists and a handler the server
// calls. Whether a tool is read-only, destructive or idempotent is declared
// once, in its annotations.
type Tool struct {
	Name        string
	Description string
	Annotations mcp.ToolAnnotations
	// Schema is the input schema the client sees (bench included).
	Schema json.RawMessage
	// Decode checks raw arguments (bench already taken out) and answers the
	// value Handle gets in Call.Args.
	Decode func(raw json.RawMessage) (any, error)
	// Handle runs a call whose arguments were already checked.
	Handle func(ctx context.Context, c *Call) (*mcp.CallToolResult, error)
	// Redact lists argument names whose values never reach the audit log
	// (typed text, file contents, passwords).
	Redact []string
	// VMID answers the vmid a call acts on, for the audit log (0: none).
	VMID func(args any) int
	// NoBench: the tool lists benches or storages and opens none, so it
	// needs no bench's credential (Call.Caller is nil).
	NoBench bool
	// bound, where set, renders Schema and Decode within the server's
	// limits (its waits up to max_wait); newTool's tools have it.
	bound func(limits)
}

// Call is one tool call: the caller on the bench and the decoded
// arguments.
type Call struct {
	Tool    *Tool
	Caller  *hostapi.Caller     // nil for a NoBench tool
	Creds   hostapi.Credentials // what the caller brought (a stand's build opens its own caller with them)
	Bench   string              // the bench's configured name
	Args    any
	Request *mcp.CallToolRequest
	Server  *Server
}

// def answers the MCP definition of the tool.
func (t *Tool) def() *mcp.Tool {
	return &mcp.Tool{
		Name:        t.Name,
		Title:       t.Annotations.Title,
		Description: t.Description,
		InputSchema: t.Schema,
		Annotations: &t.Annotations,
	}
}

// benchParam is the argument every tool takes.
var benchParam = param{name: "bench", kind: "string", desc: "which bench to run on (bench_status lists them); default: the server's default bench"}

// newTool builds a tool from a typed handler: In is the argument struct
// whose tags declare the input (see schema.go).
func newTool[In any](name, desc string, ann mcp.ToolAnnotations, handle func(ctx context.Context, c *Call, in *In) (*mcp.CallToolResult, error)) *Tool {
	declared := specOf(reflect.TypeFor[In]())
	t := &Tool{
		Name: name, Description: desc, Annotations: ann,
		Handle: func(ctx context.Context, c *Call) (*mcp.CallToolResult, error) {
			return handle(ctx, c, c.Args.(*In))
		},
	}
	t.bound = func(l limits) {
		sp := declared.within(l)
		t.Schema = spec{params: append(append([]param{}, sp.params...), benchParam)}.schema()
		t.Decode = func(raw json.RawMessage) (any, error) {
			in := new(In)
			return in, sp.decode(raw, in)
		}
	}
	t.bound(defaultLimits)
	if _, ok := reflect.TypeFor[In]().FieldByName("VMID"); ok {
		t.VMID = func(args any) int { return int(reflect.ValueOf(args).Elem().FieldByName("VMID").Int()) }
	}
	return t
}

// withoutBench answers an input schema without its bench property.
func withoutBench(schema json.RawMessage) json.RawMessage {
	var sc map[string]any
	if json.Unmarshal(schema, &sc) != nil {
		return schema
	}
	props, _ := sc["properties"].(map[string]any)
	delete(props, "bench")
	out, err := json.Marshal(sc) // map keys sorted: as stable as the original
	if err != nil {
		return schema
	}
	return out
}

// splitBench takes the bench argument out of raw arguments.
func splitBench(raw json.RawMessage) (json.RawMessage, string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return raw, "", nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", &argError{"arguments must be a JSON object"}
	}
	b, ok := m["bench"]
	if !ok {
		return raw, "", nil
	}
	var bench string
	if err := json.Unmarshal(b, &bench); err != nil {
		return nil, "", &argError{"bench must be a string"}
	}
	delete(m, "bench")
	raw, _ = json.Marshal(m)
	return raw, bench, nil
}

// Results.

// text answers plain text.
func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// errorResult renders an error the model should read: "error: ..." and,
// when there is one, a "hint: ..." line.
func errorResult(err error) *mcp.CallToolResult {
	msg := "error: " + err.Error()
	if hint := hostapi.HintOf(err); hint != "" {
		msg += "\nhint: " + hint
	}
	var ae *argError
	if errors.As(err, &ae) {
		msg = "error: invalid arguments: " + ae.msg + "\nhint: the tool's input schema lists every argument, its type and range"
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// tsv renders rows as tab-separated lines, tabs and newlines in values
// replaced so a row stays a row.
func tsv(rows [][]string) string {
	var b strings.Builder
	clean := strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")
	for _, r := range rows {
		for i, v := range r {
			if i > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(clean.Replace(v))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// withImage adds a PNG to a result.
func withImage(res *mcp.CallToolResult, data []byte, mime string) *mcp.CallToolResult {
	res.Content = append(res.Content, &mcp.ImageContent{MIMEType: mime, Data: data})
	return res
}

func ptr[T any](v T) *T { return &v }

// Annotation sets, by the policy annotations_test.go states for every tool:
// read-only changes no machine (no VM, no bench, not the server's disk);
// destructive can lose data or state (a file's content, a VM's unsaved
// state, work open in a desktop); idempotent: a second identical call
// changes nothing more; open world: what it makes the guest do can reach
// beyond the bench (the guest's network).
var (
	readOnly              = mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false), DestructiveHint: ptr(false)}
	mutating              = mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}
	idempotent            = mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)}
	destructive           = mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)}
	destructiveIdempotent = mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}
	// runsInGuest: a command or input the caller chose, run as root or as
	// the desktop user; anything may follow.
	runsInGuest = mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)}
)

// titled is an annotation set with the tool's human title.
func titled(ann mcp.ToolAnnotations, title string) mcp.ToolAnnotations {
	ann.Title = title
	return ann
}

// secs is a tool argument's seconds as a duration (hostapi's unit).
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
