package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/hostapi/calls"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/transcript"
)

// scriptArgs are a script tool's decoded arguments.
type scriptArgs struct {
	VMID   int
	Params map[string]string
}

// scriptTool makes the MCP tool vm_<name> of a tool script: vmid plus the
// script's params (strings; one without a default is required).
func (ss *scriptSet) scriptTool(sc *script) *Tool {
	m := sc.manifest()
	sp := spec{params: []param{{name: "vmid", kind: "integer", desc: "the VM to run on (one of yours: vm_list_my_vms)", min: ptr(1.0), required: true}}}
	for _, p := range m.Params {
		pp := param{name: p.Name, kind: "string", desc: p.Description, required: p.Default == nil}
		if p.Default != nil {
			pp.def = *p.Default
		}
		sp.params = append(sp.params, pp)
	}
	shown := spec{params: append(append([]param{}, sp.params...), benchParam)}
	t := &Tool{
		Name:        "vm_" + m.Name,
		Description: m.Description,
		Annotations: mutating,
		Schema:      shown.schema(),
		Decode:      func(raw json.RawMessage) (any, error) { return decodeScriptArgs(sp, raw) },
		VMID:        func(args any) int { return args.(*scriptArgs).VMID },
	}
	t.Handle = func(ctx context.Context, c *Call) (*mcp.CallToolResult, error) {
		return ss.runTool(ctx, c, sc, c.Args.(*scriptArgs))
	}
	return t
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
func (ss *scriptSet) runTool(ctx context.Context, c *Call, sc *script, in *scriptArgs) (*mcp.CallToolResult, error) {
	v, release, err := c.Session.LockVM(ctx, in.VMID)
	if err != nil {
		return nil, err
	}
	defer release()
	c.Session.ForScript()
	out, err := ss.Run(ctx, v, sc, in.Params, RunHooks{Log: ss.log.With("script", sc.name, "vmid", in.VMID).Info})
	if err != nil {
		return nil, err
	}
	return out.render(), nil
}

// RunOutcome is a finished script run.
type RunOutcome struct {
	Script     string
	VMID       int
	Value      json.RawMessage
	Calls      int
	Elapsed    time.Duration
	Transcript string // path, "" when none was written
	Shot       *hostapi.Frame
	ShotIsVal  bool // the value is the shot itself
}

// render turns an outcome into the tool's answer: a line, the value (text
// as is, JSON otherwise) and the last screenshot.
func (o RunOutcome) render() *mcp.CallToolResult {
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
		if png, shown, err := o.Shot.PNG(1); err == nil {
			res.Content = append(res.Content, &mcp.TextContent{Text: sizeLine(o.Shot.Image.Bounds(), shown)})
			withImage(res, png)
		}
	}
	return res
}

// depthKey carries the recipe nesting depth of a run.
type depthKey struct{}

// RunHooks watch a run: its log lines, and each host call as it ends (the
// live step log of `poligon run`).
type RunHooks struct {
	Log  func(msg string, args ...any)
	Step func(call string, args, answer json.RawMessage, err error, took time.Duration)
}

// Run runs a script on v (the caller holds v's lock; its session is a
// script session) and records its transcript. It serves tool calls and
// `poligon run`. The values of params named like secrets are scrubbed from
// everything the run leaves behind: transcript, log lines, step lines and
// its error.
func (ss *scriptSet) Run(ctx context.Context, v *hostapi.VM, sc *script, params map[string]string, hooks RunHooks) (RunOutcome, error) {
	params = withDefaults(sc.manifest(), params) // so defaults are scrubbed too
	scrub := secretScrubber(params)
	log := func(msg string, args ...any) {
		if hooks.Log != nil {
			hooks.Log(scrub(msg), scrubArgs(scrub, args)...)
		}
	}
	host := &hostapi.Script{VM: v, Log: func(m string) { log(m) }}
	var seed [8]byte
	rand.Read(seed[:])
	header := transcript.Header{
		Script: sc.file, SHA256: sc.sum, VMID: v.ID(), Params: redactParams(params),
		Seed: int64(binary.LittleEndian.Uint64(seed[:]) >> 1), Clock: time.Now().UTC().Truncate(time.Millisecond),
	}
	w, path := ss.openTranscript(sc.name, v.ID())
	defer w.Close()
	redact := secretRedactor(params)
	counted := &countingHost{next: hostAdapter(host), step: hooks.Step, redact: redact, scrub: scrub}
	rec := transcript.NewRecorder(scrubWriter{w, scrub}, header, counted, transcript.WithRedact(redact))
	host.Recipe = func(ctx context.Context, name string, rp map[string]string) (json.RawMessage, error) {
		return ss.runRecipe(ctx, rec, v, name, rp, log)
	}
	log("script started", "transcript", path)
	start := time.Now()
	res, err := sc.module.Run(ctx, runtime.Run{
		Host: rec, Params: params, VMID: v.ID(), Seed: header.Seed, Clock: header.Clock,
		Log: func(m string) { log(m) }, Limits: ss.limits(sc),
	})
	out := RunOutcome{Script: sc.name, VMID: v.ID(), Value: res.Value, Elapsed: time.Since(start), Transcript: path, Calls: int(counted.n.Load())}
	if err != nil {
		err = scriptFailure(sc.name, err, out, scrub)
		log("script failed", "err", err.Error())
		return out, err
	}
	if f, id, ok := host.LastShot(); ok {
		out.Shot = &f
		var shot calls.ShotAnswer
		out.ShotIsVal = json.Unmarshal(res.Value, &shot) == nil && shot.Image == id
	}
	log("script finished", "seconds", out.Elapsed.Seconds(), "calls", out.Calls)
	return out, nil
}

func (ss *scriptSet) limits(sc *script) runtime.Limits {
	l := runtime.Limits{Timeout: ss.srv.cfg.Limits.ScriptTimeout.Duration, MemoryMB: ss.srv.cfg.Limits.ScriptMemoryMB}
	if t := sc.manifest().Timeout; t > 0 {
		l.Timeout = t
	}
	return l
}

// runRecipe runs a recipe inside a run: same VM, same lock, same
// transcript, one level deeper.
func (ss *scriptSet) runRecipe(ctx context.Context, host runtime.Host, v *hostapi.VM, name string, params map[string]string, log func(string, ...any)) (json.RawMessage, error) {
	depth, _ := ctx.Value(depthKey{}).(int)
	if depth >= maxRecipeDepth {
		return nil, hostapi.Failf("flatten the recipe chain", "recipe %s: recipes nest at most %d deep", name, maxRecipeDepth)
	}
	sc, ok := ss.lookup(name)
	if !ok {
		return nil, hostapi.Failf("poligon check lists the loaded scripts and recipes", "no recipe named %q", name)
	}
	log("recipe started", "recipe", name)
	res, err := sc.module.Run(context.WithValue(ctx, depthKey{}, depth+1), runtime.Run{
		Host: host, Params: params, VMID: v.ID(), Log: func(m string) { log(m, "recipe", name) }, Limits: ss.limits(sc),
	})
	if err != nil {
		return nil, &hostapi.Error{Message: fmt.Sprintf("recipe %s: %v", name, err), Hint: hintOfScript(err), Err: err}
	}
	return res.Value, nil
}

// hostAdapter answers script calls with hostapi, turning its errors into
// the runtime's (the message and hint the script sees).
func hostAdapter(h *hostapi.Script) runtime.Host {
	return runtime.HostFunc(func(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
		answer, err := h.Call(ctx, name, args)
		if err != nil {
			return nil, &runtime.HostError{Call: name, Message: err.Error(), Hint: hostapi.HintOf(err)}
		}
		return answer, nil
	})
}

// countingHost counts the calls that reach the host, and shows each to
// step when set (arguments redacted, errors scrubbed).
type countingHost struct {
	next   runtime.Host
	n      atomic.Int64
	step   func(call string, args, answer json.RawMessage, err error, took time.Duration)
	redact func(call string, args json.RawMessage) json.RawMessage
	scrub  func(string) string
}

func (c *countingHost) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	c.n.Add(1)
	start := time.Now()
	answer, err := c.next.Call(ctx, name, args)
	if c.step != nil {
		shown, shownErr := args, err
		if c.redact != nil {
			shown = c.redact(name, args)
		}
		if err != nil && c.scrub != nil {
			shownErr = errors.New(c.scrub(err.Error()))
		}
		c.step(name, shown, nil, shownErr, time.Since(start))
	}
	return answer, err
}

// scrubWriter scrubs secrets from everything written through it (a
// transcript line: arguments, answers and errors alike).
type scrubWriter struct {
	w     interface{ Write([]byte) (int, error) }
	scrub func(string) string
}

func (s scrubWriter) Write(p []byte) (int, error) {
	if _, err := s.w.Write([]byte(s.scrub(string(p)))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// nopCloser is a transcript sink when there is no state directory.
type nopCloser struct{}

func (nopCloser) Write(p []byte) (int, error) { return len(p), nil }
func (nopCloser) Close() error                { return nil }

// openTranscript creates <state>/transcripts/<time>-<script>-vm<id>-<rand>.jsonl.
func (ss *scriptSet) openTranscript(name string, vmid int) (interface {
	Write([]byte) (int, error)
	Close() error
}, string) {
	dir := filepath.Join(ss.srv.cfg.StateDir, "transcripts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		ss.log.Warn("no transcript", "err", err)
		return nopCloser{}, ""
	}
	var r [3]byte
	rand.Read(r[:])
	path := filepath.Join(dir, fmt.Sprintf("%s-%s-vm%d-%s.jsonl", time.Now().UTC().Format("20060102-150405"), name, vmid, hex.EncodeToString(r[:])))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		ss.log.Warn("no transcript", "err", err)
		return nopCloser{}, ""
	}
	return &bufferedFile{Writer: bufio.NewWriter(f), f: f}, path
}

// bufferedFile writes a transcript in few system calls; Close flushes.
type bufferedFile struct {
	*bufio.Writer
	f *os.File
}

func (b *bufferedFile) Close() error {
	err := b.Flush()
	if cerr := b.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// withDefaults answers params with the manifest's defaults filled in.
func withDefaults(m runtime.Manifest, params map[string]string) map[string]string {
	out := make(map[string]string, len(m.Params))
	for _, p := range m.Params {
		if p.Default != nil {
			out[p.Name] = *p.Default
		}
	}
	for k, v := range params {
		out[k] = v
	}
	return out
}

// redactParams blanks params named like secrets for the transcript header.
func redactParams(params map[string]string) map[string]string {
	out := make(map[string]string, len(params))
	for k, v := range params {
		if secretName.MatchString(k) {
			v = redacted(v)
		}
		out[k] = v
	}
	return out
}

// secretValues answers the values of params named like secrets (a
// password a login script types or pipes to chpasswd).
func secretValues(params map[string]string) []string {
	var secrets []string
	for k, v := range params {
		if secretName.MatchString(k) && len(v) >= 3 {
			secrets = append(secrets, v)
		}
	}
	return secrets
}

// secretScrubber answers a function that replaces every secret value in a
// text, raw or as it appears inside a JSON string, with <redacted>.
func secretScrubber(params map[string]string) func(string) string {
	var forms []string
	for _, s := range secretValues(params) {
		forms = append(forms, s)
		for _, f := range jsonForms(s) {
			if f != s {
				forms = append(forms, f)
			}
		}
	}
	return func(text string) string {
		for _, f := range forms {
			text = strings.ReplaceAll(text, f, "<redacted>")
		}
		return text
	}
}

// scrubArgs scrubs the string values of slog key-value pairs.
func scrubArgs(scrub func(string) string, args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok {
			a = scrub(s)
		}
		out[i] = a
	}
	return out
}

// secretRedactor blanks, in the arguments of every recorded call, the
// secret params' values and the text typed on the keyboard. A replay
// compares against the same blanked form.
func secretRedactor(params map[string]string) func(call string, args json.RawMessage) json.RawMessage {
	scrub := secretScrubber(params)
	return func(call string, args json.RawMessage) json.RawMessage {
		if call == calls.Type {
			var a calls.TypeArgs
			if json.Unmarshal(args, &a) == nil {
				// No length: a replay types a placeholder of another length.
				args, _ = json.Marshal(calls.TypeArgs{Text: "<redacted>"})
			}
		}
		return json.RawMessage(scrub(string(args)))
	}
}

// jsonForms answers how s may appear inside a JSON string: with and
// without HTML escaping (Go's encoder escapes <, > and &; JavaScript's does
// not).
func jsonForms(s string) []string {
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	escaped, _ := json.Marshal(s)
	forms := []string{strings.TrimSuffix(plain.String(), "\n")}
	if e := string(escaped); e != forms[0] {
		forms = append(forms, e)
	}
	for i, f := range forms {
		forms[i] = f[1 : len(f)-1]
	}
	return forms
}

// scriptFailure renders a failed run for the model: where it failed, why,
// a hint, and how far it got; secrets scrubbed.
func scriptFailure(name string, err error, out RunOutcome, scrub func(string) string) error {
	msg := scrub(fmt.Sprintf("%s failed after %d host calls: %v", name, out.Calls, err))
	hint := scrub(hintOfScript(err))
	if out.Transcript != "" {
		note := "the run's transcript is " + out.Transcript
		if hint != "" {
			hint += "; " + note
		} else {
			hint = note
		}
	}
	return &hostapi.Error{Message: msg, Hint: hint, Err: err}
}

func hintOfScript(err error) string {
	var se *runtime.ScriptError
	if errors.As(err, &se) && se.Hint != "" {
		return se.Hint
	}
	var he *runtime.HostError
	if errors.As(err, &he) {
		return he.Hint
	}
	return hostapi.HintOf(err)
}
