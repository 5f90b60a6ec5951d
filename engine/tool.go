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

// Def is everything that describes a tool, in one place: the MCP
// definition a client lists, the toolset it is offered in, what it can do
// to the world and the README's row are all made from it (readme.go).
type Def struct {
	Name        string
	Toolset     string // the family it is offered in (config.Toolsets)
	Title       string // for people: the MCP title
	Description string // for the model: what it does and answers
	Summary     string // for people: its row in the README's tools table
	Effect      Effect // its annotations follow from it
	// Redact lists argument names whose values never reach the audit log
	// (typed text, file contents, passwords).
	Redact []string
	// NoBench: the tool lists benches or storages and opens none, so it
	// needs no bench's credential (Call.Caller is nil).
	NoBench bool
	// Screen: the tool acts on or reads the screen, so its trace steps carry
	// the frames before and after it.
	Screen bool
	// Reads: what its answer is, for its trace step: "text" (OCR) or
	// "elements" (a vision model's list); "" for neither.
	Reads string
}

// Tool is data: its definition and a handler the server calls.
type Tool struct {
	Def
	Annotations mcp.ToolAnnotations // Effect's, with the title
	// Schema is the input schema the client sees (bench included).
	Schema json.RawMessage
	// Decode checks raw arguments (bench already taken out) and answers the
	// value Handle gets in Call.Args.
	Decode func(raw json.RawMessage) (any, error)
	// Handle runs a call whose arguments were already checked.
	Handle func(ctx context.Context, c *Call) (*mcp.CallToolResult, error)
	// VMID answers the vmid a call acts on, for the audit log (0: none).
	VMID func(args any) int
	// params are the arguments Schema shows (bench left out), for the
	// README's row.
	params []param
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
func newTool[In any](d Def, handle func(ctx context.Context, c *Call, in *In) (*mcp.CallToolResult, error)) *Tool {
	declared := specOf(reflect.TypeFor[In]())
	t := &Tool{
		Def: d, Annotations: d.Effect.annotations(d.Title),
		Handle: func(ctx context.Context, c *Call) (*mcp.CallToolResult, error) {
			return handle(ctx, c, c.Args.(*In))
		},
	}
	t.bound = func(l limits) {
		sp := declared.within(l)
		t.params = sp.shown()
		t.Schema = spec{params: append(append([]param{}, t.params...), benchParam)}.schema()
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

// secs is a tool argument's seconds as a duration (hostapi's unit).
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
