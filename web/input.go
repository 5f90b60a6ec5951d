package web

import (
	"context"
	"encoding/json"
	"errors"
	"image"
	"net/http"
	"strconv"
	"time"

	"github.com/poligon/poligon/hostapi"
	"github.com/poligon/poligon/internal/audit"
	"github.com/poligon/poligon/internal/logs"
	"github.com/poligon/poligon/internal/redact"
	"github.com/poligon/poligon/internal/trace"
)

// Input from the browser: keyboard and mouse on the caller's VM, through
// the same hostapi verbs the ui_* tools use (LockVM checks the VM is the
// caller's, or on a physical bench that they hold its lease; the verbs
// apply the bench's gates). A VM another call holds (a script runs on it)
// answers busy after a second: the page never waits on a script. Each
// input is a trace step (source web) and an audit record (transport web),
// named as the tool that does the same.

// inputBusyWait is how long an input waits for a VM another call holds:
// long enough for a short call (a vm_exec, a screenshot), far shorter than
// a script's run.
const inputBusyWait = time.Second

// inputRequest is one input, as the page sends it.
type inputRequest struct {
	Kind   string `json:"kind"` // type, key, click, move, drag
	Text   string `json:"text,omitempty"`
	Key    string `json:"key,omitempty"`
	X      int    `json:"x"`
	Y      int    `json:"y"`
	X2     int    `json:"x2,omitempty"`
	Y2     int    `json:"y2,omitempty"`
	Button string `json:"button,omitempty"`
	Count  int    `json:"count,omitempty"`
}

// call names the input as the tool that does the same, and its arguments
// as the audit log keeps them (typed text by its size only).
func (in inputRequest) call() (string, map[string]any, bool) {
	switch in.Kind {
	case "type":
		return "ui_type", map[string]any{"text": redact.Placeholder(in.Text)}, true
	case "key":
		return "ui_key", map[string]any{"key": in.Key}, true
	case "click":
		return "ui_click", map[string]any{"x": in.X, "y": in.Y, "button": in.Button, "count": in.Count}, true
	case "move":
		return "ui_move", map[string]any{"x": in.X, "y": in.Y}, true
	case "drag":
		return "ui_drag", map[string]any{"x1": in.X, "y1": in.Y, "x2": in.X2, "y2": in.Y2}, true
	}
	return "", nil, false
}

func (in inputRequest) do(ctx context.Context, vm *hostapi.VM) error {
	switch in.Kind {
	case "type":
		return vm.Type(ctx, in.Text)
	case "key":
		return vm.Press(ctx, in.Key)
	case "click":
		return vm.Click(ctx, in.X, in.Y, in.Button, in.Count, "")
	case "move":
		return vm.Move(ctx, in.X, in.Y, "")
	default:
		return vm.Drag(ctx, in.X, in.Y, in.X2, in.Y2, "")
	}
}

func (s *Server) input(w http.ResponseWriter, r *http.Request, sess *session) {
	refuse := func(code int, err error) {
		writeJSON(w, code, map[string]any{"error": err.Error(), "hint": hostapi.HintOf(err)})
	}
	bench := r.PathValue("bench")
	vmid, err := strconv.Atoi(r.PathValue("vmid"))
	if err != nil || vmid <= 0 {
		s.notFound(w, r)
		return
	}
	var in inputRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil {
		refuse(http.StatusBadRequest, hostapi.Failf(`send JSON: {"kind": "type", "text": "..."}, {"kind": "key", "key": "ret"}, {"kind": "click", "x": 10, "y": 20}`, "input is not JSON"))
		return
	}
	name, args, ok := in.call()
	if !ok {
		refuse(http.StatusBadRequest, hostapi.Failf("kind is type, key, click, move or drag", "unknown input kind %q", in.Kind))
		return
	}
	who, err := s.app.Caller(r.Context(), sess.who.Creds, bench)
	if err != nil {
		s.notFound(w, r)
		return
	}
	ctx := logs.WithReq(r.Context(), s.nextReq())
	start := time.Now()
	vm, release, err := who.WithBusyWait(inputBusyWait).LockVM(ctx, vmid)
	if errors.Is(err, hostapi.ErrBusy) {
		refuse(http.StatusConflict, err)
		return
	}
	if err != nil {
		s.notFound(w, r) // not theirs, or not there: the same answer
		return
	}
	before, _ := who.LastFrame(vmid)
	err = in.do(ctx, vm)
	release()
	var dry *hostapi.DryRun
	if errors.As(err, &dry) {
		s.log.InfoContext(ctx, "dry run", "tool", name, "bench", bench, "skipped", dry.What)
		err = nil
	}
	s.record(ctx, sess, who, vm, bench, name, args, start, before.Image, err)
	if err != nil {
		refuse(http.StatusUnprocessableEntity, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// record writes the input's audit record, log line and trace step (its
// frame after taken a moment later, off the request's path).
func (s *Server) record(ctx context.Context, sess *session, who *hostapi.Caller, vm *hostapi.VM, bench, name string,
	args map[string]any, start time.Time, before *image.RGBA, err error) {
	took := time.Since(start)
	rec := audit.Record{Req: logs.Req(ctx), Caller: sess.who.ID, Owner: who.Owner(), Transport: "web", Bench: bench, Tool: name,
		VMID: vm.ID(), Args: args, Outcome: "ok", Ms: took.Seconds() * 1000}
	if err != nil {
		rec.Outcome, rec.Error = "error", logs.Cut(err.Error(), err).Safe
	}
	s.app.Audit.Write(rec)
	attrs := []any{"req", rec.Req, "tool", name, "bench", bench, "vmid", rec.VMID, "ms", int64(rec.Ms), "outcome", rec.Outcome, "transport", "web"}
	if err != nil {
		attrs = append(attrs, "error", rec.Error)
	}
	s.log.InfoContext(ctx, "tool", attrs...)
	if s.app.Trace == nil {
		return
	}
	step := trace.Scope{Bench: bench, Caller: sess.who.ID, Source: trace.SourceWeb}.Step()
	step.At, step.Took, step.Req = start, took, rec.Req
	step.Owner, step.VMID, step.VM, step.Call, step.Outcome, step.Error = rec.Owner, rec.VMID, vm.Info().Name, name, rec.Outcome, rec.Error
	step.Args, _ = json.Marshal(args)
	watcher := vm.Watcher()
	s.app.Trace.RecordAfter(step, before, trace.GlanceAfter, func() *image.RGBA {
		ctx, cancel := context.WithTimeout(logs.WithReq(context.Background(), rec.Req), 5*time.Second)
		defer cancel()
		f, err := watcher.Frame(ctx)
		if err != nil {
			return nil
		}
		return f.Image
	})
}
