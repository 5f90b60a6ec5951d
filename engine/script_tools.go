package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/engine/catalog"
)

// scriptArgs are a script tool's decoded arguments.
type scriptArgs struct {
	VMID   int
	Params map[string]string
}

// scriptTool makes the MCP tool vm_<name> of a tool script: vmid plus the
// script's params (strings; one without a default is required).
func (s *Server) scriptTool(sc *catalog.Script) *Tool {
	m := sc.Manifest()
	sp := spec{params: []param{{name: "vmid", kind: "integer", desc: "the VM to run on (one of yours: vm_list_my_vms)", min: ptr(1.0), required: true}}}
	for _, p := range m.Params {
		pp := param{name: p.Name, kind: "string", desc: p.Description, required: p.Default == nil}
		if p.Default != nil {
			pp.def = *p.Default
		}
		sp.params = append(sp.params, pp)
	}
	shown := spec{params: append(append([]param{}, sp.params...), benchParam)}
	// A script may run anything as root; its title is the manifest's, or
	// its name in words (gnome_login: "Gnome login (script)").
	title := m.Title
	if title == "" {
		title = strings.ToUpper(m.Name[:1]) + strings.ReplaceAll(m.Name[1:], "_", " ") + " (script)"
	}
	d := Def{Name: "vm_" + m.Name, Toolset: "scripts", Screen: true, Title: title, Description: m.Description, Summary: firstSentence(m.Description),
		Effect: runsInGuest("a script: it runs what it was written to run, as root, and types into the screen")}
	t := &Tool{
		Def:         d,
		Annotations: d.Effect.annotations(title),
		params:      sp.params,
		Schema:      shown.schema(),
		Decode:      func(raw json.RawMessage) (any, error) { return decodeScriptArgs(sp, raw) },
		VMID:        func(args any) int { return args.(*scriptArgs).VMID },
	}
	t.Handle = func(ctx context.Context, c *Call) (*mcp.CallToolResult, error) {
		return s.runTool(ctx, c, sc, c.Args.(*scriptArgs))
	}
	return t
}

// firstSentence is a description's first sentence, for the README's row.
func firstSentence(s string) string {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '.' && s[i+1] == ' ' {
			return s[:i]
		}
	}
	return strings.TrimSuffix(s, ".")
}

// decodeScriptArgs checks a script tool's arguments: vmid an integer, every
// param a string, required ones present, nothing unknown.
func decodeScriptArgs(sp spec, raw json.RawMessage) (*scriptArgs, error) {
	var given map[string]json.RawMessage
	if len(bytes.TrimSpace(raw)) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &given); err != nil {
			return nil, &argError{"arguments must be a JSON object"}
		}
	}
	args := &scriptArgs{Params: map[string]string{}}
	var problems []string
	for _, p := range sp.params {
		v, ok := given[p.name]
		delete(given, p.name)
		switch {
		case !ok && p.required:
			problems = append(problems, p.name+" is required")
		case !ok:
		case p.name == "vmid":
			if err := json.Unmarshal(v, &args.VMID); err != nil || args.VMID < 1 {
				problems = append(problems, "vmid must be a positive integer")
			}
		default:
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				problems = append(problems, p.name+" must be a string")
			}
			args.Params[p.name] = s
		}
	}
	var unknown []string
	for name := range given {
		unknown = append(unknown, "unknown argument "+name)
	}
	sort.Strings(unknown)
	problems = append(problems, unknown...)
	if len(problems) > 0 {
		return nil, &argError{strings.Join(problems, "; ")}
	}
	return args, nil
}

// runTool runs a tool script on a VM the caller owns, holding the VM's lock
// for the whole run, with a transcript.
func (s *Server) runTool(ctx context.Context, c *Call, sc *catalog.Script, in *scriptArgs) (*mcp.CallToolResult, error) {
	v, release, err := c.Caller.LockVM(ctx, in.VMID)
	if err != nil {
		return nil, err
	}
	defer release()
	c.Caller.ForScript()
	out, err := s.app.Scripts.Run(ctx, v, sc, in.Params, catalog.RunHooks{Log: s.log.With("script", sc.Name, "vmid", in.VMID).Info})
	if err != nil {
		return nil, err
	}
	return renderOutcome(out), nil
}

// render turns an outcome into the tool's answer: a line, the value (text
// as is, JSON otherwise) and the last screenshot.
func renderOutcome(o catalog.RunOutcome) *mcp.CallToolResult {
	head := fmt.Sprintf("ok %s vmid %d: %d host calls in %.1f s", o.Script, o.VMID, o.Calls, o.Elapsed.Seconds())
	var s string
	switch {
	case o.ShotIsVal, len(o.Value) == 0, string(o.Value) == "null":
	case json.Unmarshal(o.Value, &s) == nil:
		head += "\n" + s
	default:
		var buf bytes.Buffer
		json.Indent(&buf, o.Value, "", "  ")
		head += "\n" + buf.String()
	}
	res := text("%s", head)
	if o.Shot != nil {
		if data, mime, shown, err := o.Shot.Encode(1); err == nil {
			res.Content = append(res.Content, &mcp.TextContent{Text: sizeLine(o.Shot.Image.Bounds(), shown)})
			withImage(res, data, mime)
		}
	}
	return res
}

// scriptTools is how the catalog tells the server of tool scripts, loaded
// or reloaded; without the scripts toolset none becomes a tool (recipes and
// stand plans still run them).
type scriptTools struct{ s *Server }

func (t scriptTools) AddScript(sc *catalog.Script) {
	if t.s.offers("scripts") {
		t.s.AddTool(t.s.scriptTool(sc))
	}
}

func (t scriptTools) RemoveScript(name string) {
	if t.s.offers("scripts") {
		t.s.RemoveTool("vm_" + name)
	}
}

// BuiltinNames answers the names of the built-in tools: names scripts may
// not take.
var BuiltinNames = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	for _, t := range builtinTools() {
		names[t.Name] = true
	}
	return names
})
