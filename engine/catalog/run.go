package catalog

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
	"image"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/hostapi/calls"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/redact"
	"github.com/poligon/poligon/internal/trace"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/transcript"
)

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

// depthKey carries the recipe nesting depth of a run.
type depthKey struct{}

// RunHooks watch a run: its log lines, and each host call as it ends (the
// live step log of `poligon run`).
type RunHooks struct {
	Log  func(msg string, args ...any)
	Step func(call string, args, answer json.RawMessage, err error, took time.Duration)
	// Progress hears the steps the script marks (vm.step): a stand's
	// builder records them.
	Progress func(n, of int, label string)
}

// Run runs a script on v (v's lock is held for the run; its caller is
// marked ForScript) and records its transcript. It serves tool calls and
// `poligon run`. The values of params named like secrets are scrubbed from
// everything the run leaves behind: transcript, log lines, step lines and
// its error.
func (ss *Catalog) Run(ctx context.Context, v *hostapi.VM, sc *Script, params map[string]string, hooks RunHooks) (RunOutcome, error) {
	params, err := sc.Manifest().Bind(params) // bound here so defaults are scrubbed too
	if err != nil {
		return RunOutcome{Script: sc.Name, VMID: v.ID()}, hostapi.Failf("the tool's input schema lists its params", "%v", err)
	}
	scrub := secretScrubber(params)
	req := logs.Req(ctx) // the tool call's (or stand_apply's) id: the run's lines carry it
	log := func(msg string, args ...any) {
		if hooks.Log != nil {
			args = scrubArgs(scrub, args)
			if req != "" {
				args = append(args, "req", req)
			}
			hooks.Log(scrub(msg), args...)
		}
	}
	host := &hostapi.Script{VM: v, Log: func(m string) { log(m) }, Step: hooks.Progress, Note: hostapi.ScriptNote("vm_"+sc.Name, params)}
	var seed [8]byte
	rand.Read(seed[:])
	header := transcript.Header{
		Script: sc.File, SHA256: sc.Sum, VMID: v.ID(), Params: redactParams(params),
		Seed: int64(binary.LittleEndian.Uint64(seed[:]) >> 1), Clock: time.Now().UTC().Truncate(time.Millisecond),
	}
	w, path := ss.openTranscript(sc.Name, v.ID())
	defer w.Close()
	redact := secretRedactor(params)
	counted := &countingHost{next: hostAdapter(host), step: hooks.Step, redact: redact, scrub: scrub, trace: ss.trace, vm: v}
	if ss.log != nil {
		counted.log = ss.log.With("script", sc.Name, "vmid", v.ID())
	}
	rec := transcript.NewRecorder(scrubWriter{w, scrub}, header, counted, transcript.WithRedact(redact))
	host.Recipe = func(ctx context.Context, name string, rp map[string]string) (json.RawMessage, error) {
		return ss.runRecipe(ctx, rec, v, name, rp, log)
	}
	log("script started", "transcript", path)
	start := time.Now()
	res, err := sc.Module.Run(ctx, runtime.Run{
		Host: rec, Params: params, VMID: v.ID(), Seed: header.Seed, Clock: header.Clock,
		Log: func(m string) { log(m) }, Limits: ss.limitsOf(sc),
	})
	out := RunOutcome{Script: sc.Name, VMID: v.ID(), Value: res.Value, Elapsed: time.Since(start), Transcript: path, Calls: int(counted.n.Load())}
	if err != nil {
		err = scriptFailure(sc.Name, err, out, scrub)
		// The line stops where guest output begins; the model reads it all.
		shown := logs.Cut(err.Error(), err)
		log("script failed", "err", shown.Safe, "error_chars", shown.Chars)
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

func (ss *Catalog) limitsOf(sc *Script) runtime.Limits {
	l := ss.limits
	if t := sc.Manifest().Timeout; t > 0 {
		l.Timeout = t
	}
	return l
}

// runRecipe runs a recipe inside a run: same VM, same lock, same
// transcript, one level deeper.
func (ss *Catalog) runRecipe(ctx context.Context, host runtime.Host, v *hostapi.VM, name string, params map[string]string, log func(string, ...any)) (json.RawMessage, error) {
	depth, _ := ctx.Value(depthKey{}).(int)
	if depth >= maxRecipeDepth {
		return nil, hostapi.Failf("flatten the recipe chain", "recipe %s: recipes nest at most %d deep", name, maxRecipeDepth)
	}
	sc, ok := ss.lookup(name)
	if !ok {
		return nil, hostapi.Failf("poligon check lists the loaded scripts and recipes", "no recipe named %q", name)
	}
	log("recipe started", "recipe", name)
	res, err := sc.Module.Run(context.WithValue(ctx, depthKey{}, depth+1), runtime.Run{
		Host: host, Params: params, VMID: v.ID(), Log: func(m string) { log(m, "recipe", name) }, Limits: ss.limitsOf(sc),
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
			return nil, &runtime.HostError{Call: name, Message: err.Error(), Hint: hostapi.HintOf(err), Err: err}
		}
		return answer, nil
	})
}

// countingHost counts the calls that reach the host, shows each to step
// when set (arguments redacted, errors scrubbed) and logs each at debug
// with the run's req (no arguments; an error up to its payload).
type countingHost struct {
	next   runtime.Host
	n      atomic.Int64
	step   func(call string, args, answer json.RawMessage, err error, took time.Duration)
	redact func(call string, args json.RawMessage) json.RawMessage
	scrub  func(string) string
	log    *slog.Logger
	trace  *trace.Recorder // nil: no trace
	vm     *hostapi.VM
}

func (c *countingHost) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	c.n.Add(1)
	start := time.Now()
	var before *image.RGBA
	screen := c.trace != nil && touchesScreen(name)
	if screen {
		if f, ok := c.vm.Caller().LastFrame(c.vm.ID()); ok {
			before = f.Image
		}
	}
	answer, err := c.next.Call(ctx, name, args)
	if c.trace != nil {
		c.record(ctx, name, args, answer, err, start, before, screen)
	}
	if c.log != nil && c.log.Enabled(ctx, slog.LevelDebug) {
		attrs := []any{"call", name, "ms", time.Since(start).Milliseconds()}
		if err != nil {
			shown := logs.Cut(c.scrub(err.Error()), err)
			attrs = append(attrs, "error", shown.Safe)
			if shown.Chars > 0 {
				attrs = append(attrs, "error_chars", shown.Chars)
			}
		}
		c.log.DebugContext(ctx, "script host call", attrs...)
	}
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

// touchesScreen: the host calls whose steps carry the frames before and
// after them.
func touchesScreen(call string) bool {
	return strings.HasPrefix(call, "screen.") || strings.HasPrefix(call, "keyboard.") || strings.HasPrefix(call, "mouse.") || call == calls.ExecGUI
}

// record keeps a host call as a trace step: its arguments redacted as the
// transcript has them, its error scrubbed, what a screen read answered, and
// for a call on the screen the frames before and after (an input's a
// moment later, off the run's path).
func (c *countingHost) record(ctx context.Context, name string, args, answer json.RawMessage, err error, start time.Time, before *image.RGBA, screen bool) {
	scope := trace.ScopeOf(ctx)
	step := scope.Step()
	if step.Source != trace.SourceStand && step.Source != trace.SourceRun {
		step.Source = trace.SourceScript
	}
	step.At, step.Took, step.Call, step.Outcome = start, time.Since(start), name, "ok"
	step.Owner, step.VMID, step.VM, step.Req = c.vm.Caller().Owner(), c.vm.ID(), c.vm.Info().Name, logs.Req(ctx)
	if step.Caller == "" {
		step.Caller = step.Owner
	}
	step.Args = args
	if c.redact != nil {
		step.Args = c.redact(name, args)
	}
	if err != nil {
		msg := err.Error()
		if c.scrub != nil {
			msg = c.scrub(msg)
		}
		// Up to the guest's output, which can carry a password (as the
		// audit log keeps a tool's error).
		step.Outcome, step.Error = "error", logs.Cut(msg, err).Text()
	}
	if calls.ReadsText(name) && len(answer) < 64<<10 {
		step.Text = string(answer)
		if c.scrub != nil {
			step.Text = c.scrub(step.Text)
		}
	}
	switch {
	case !screen:
		c.trace.Record(step, nil, nil)
	case strings.HasPrefix(name, "keyboard.") || strings.HasPrefix(name, "mouse.") || name == calls.ExecGUI:
		w := c.vm.Watcher()
		c.trace.RecordAfter(step, before, trace.GlanceAfter, func() *image.RGBA {
			gctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			f, err := w.Frame(gctx)
			if err != nil {
				return nil
			}
			return f.Image
		})
	default:
		var after *image.RGBA
		if f, ok := c.vm.Caller().LastFrame(c.vm.ID()); ok && f.Image != before {
			after = f.Image
		}
		c.trace.Record(step, before, after)
	}
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
func (ss *Catalog) openTranscript(name string, vmid int) (interface {
	Write([]byte) (int, error)
	Close() error
}, string) {
	dir := filepath.Join(ss.stateDir, "transcripts")
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

// redactParams blanks params named like secrets for the transcript header.
func redactParams(params map[string]string) map[string]string {
	out := make(map[string]string, len(params))
	for k, v := range params {
		if redact.IsSecretName(k) {
			v = redact.Placeholder(v)
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
		if redact.IsSecretName(k) && len(v) >= 3 {
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

// secretRedactor blanks, in the arguments of every recorded call (the
// transcript's and the trace's), the secret params' values, the text typed
// on the keyboard, a written file's contents, a recipe's secret-named
// params and the secrets a command visibly carries (redact.Command). A
// replay compares against the same blanked form.
func secretRedactor(params map[string]string) func(call string, args json.RawMessage) json.RawMessage {
	scrub := secretScrubber(params)
	return func(call string, args json.RawMessage) json.RawMessage {
		switch call {
		case calls.Type:
			var a calls.TypeArgs
			if json.Unmarshal(args, &a) == nil {
				// No length: a replay types a placeholder of another length.
				args, _ = json.Marshal(calls.TypeArgs{Text: "<redacted>"})
			}
		case calls.WriteFile:
			var a calls.WriteFileArgs
			if json.Unmarshal(args, &a) == nil && a.Text+a.Base64 != "" {
				for _, c := range []*string{&a.Text, &a.Base64} {
					if *c != "" {
						*c = redact.Placeholder(*c)
					}
				}
				args, _ = json.Marshal(a)
			}
		case calls.Recipe:
			var a calls.RecipeArgs
			if json.Unmarshal(args, &a) != nil {
				break
			}
			secret := false
			for k, v := range a.Params {
				if redact.IsSecretName(k) {
					a.Params[k], secret = redact.Placeholder(v), true
				}
			}
			if secret {
				args, _ = json.Marshal(a)
			}
		case calls.Exec, calls.Expect, calls.Check, calls.RunDetached, calls.ExecGUI:
			args = redactCommand(args)
		}
		return json.RawMessage(scrub(string(args)))
	}
}

// redactCommand applies redact.Command to a call's "command" argument;
// arguments without a secret in sight are kept byte for byte.
func redactCommand(args json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	var cmd string
	if json.Unmarshal(args, &m) != nil || json.Unmarshal(m["command"], &cmd) != nil {
		return args
	}
	if safe := redact.Command(cmd); safe != cmd {
		m["command"], _ = json.Marshal(safe)
		args, _ = json.Marshal(m)
	}
	return args
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
