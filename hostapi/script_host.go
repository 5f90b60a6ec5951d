package hostapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/poligon/poligon/hostapi/calls"
)

// Script is the host side of one script run on one VM: it answers the
// script's calls (see package calls) with the VM's methods. The run holds
// the VM's lock (Caller.LockVM) for the whole run.
type Script struct {
	VM *VM
	// Log receives the script's log lines and console output.
	Log func(message string)
	// Step hears each step a script marks (vm.step); nil only logs it.
	Step func(n, of int, label string)
	// Recipe runs a recipe on the same VM; set by the engine, which knows the
	// scripts. Nil refuses recipe calls.
	Recipe func(ctx context.Context, name string, params map[string]string) (json.RawMessage, error)
	// Note is what every shot the run captures for the training dataset
	// carries: the run's tool as its origin, the run's own labels
	// (ScriptNote).
	Note ShotNote

	mu    sync.Mutex
	shots map[string]Frame // the last keptShots of the run
	order []string
	taken int
}

// ScriptNote is the note of a script run's shots: origin tool (vm_<name>),
// and the run's app, locale, theme, intent and user params, which label
// every shot and click it captures (without them the guest's probes
// decide).
func ScriptNote(tool string, params map[string]string) ShotNote {
	return ShotNote{Origin: tool, Intent: params["intent"], App: params["app"], Locale: params["locale"],
		Theme: params["theme"], User: params["user"]}
}

// note is the run's note for one call's shot.
func (h *Script) note(call string) ShotNote {
	n := h.Note
	n.Origin = strings.TrimPrefix(n.Origin+":"+call, ":")
	return n
}

// clickNote is the run's note for a click at x, y.
func (h *Script) clickNote(call string, x, y int) ShotNote {
	n := h.note(call)
	n.Click, n.ClickSource = &image.Point{X: x, Y: y}, "xy"
	return n
}

// Shot answers a screenshot taken during the run by its handle.
func (h *Script) Shot(id string) (Frame, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, ok := h.shots[id]
	return f, ok
}

// LastShot answers the run's most recent screenshot.
func (h *Script) LastShot() (Frame, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.order) == 0 {
		return Frame{}, "", false
	}
	id := h.order[len(h.order)-1]
	return h.shots[id], id, true
}

// keptShots is how many screenshots a run keeps for evidence.save and its
// answer: a frame is megabytes, and a loop of shots must not fill the host.
const keptShots = 8

func (h *Script) keep(f Frame) calls.ShotAnswer {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shots == nil {
		h.shots = map[string]Frame{}
	}
	h.taken++
	id := fmt.Sprintf("shot-%d", h.taken)
	h.shots[id] = f
	h.order = append(h.order, id)
	if len(h.order) > keptShots {
		delete(h.shots, h.order[0])
		h.order = h.order[1:]
	}
	b := f.Image.Bounds()
	digest := f.Digest()
	if h.VM != nil { // a bare host in tests
		digest = h.VM.Remember(f)
	}
	return calls.ShotAnswer{Image: id, Width: b.Dx(), Height: b.Dy(), Digest: digest}
}

// call is one entry of the dispatch table: decode args, act, answer.
type call func(h *Script, ctx context.Context, args json.RawMessage) (any, error)

// decode reads a call's arguments strictly: an unknown field is a mistake in
// the script, better reported than ignored.
func decode[T any](name string, raw json.RawMessage) (T, error) {
	var v T
	if len(raw) == 0 || string(raw) == "null" {
		return v, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, Failf("see stdlib/poligon.d.ts for the call's options", "%s: bad arguments: %v", name, err)
	}
	return v, nil
}

// duration answers a script's time option (seconds, as scripts write it),
// or the call's default (calls.Defaults) when the script left it out (0).
func duration(call, option string, v float64) time.Duration {
	if v > 0 {
		return time.Duration(v * float64(time.Second))
	}
	return calls.DefaultSeconds(call, option)
}

func wait(ok bool, d time.Duration) calls.WaitAnswer {
	return calls.WaitAnswer{OK: ok, Seconds: d.Round(time.Millisecond).Seconds()}
}

// table maps every call name to its handler.
var table = map[string]call{
	calls.Exec: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.ExecArgs](calls.Exec, raw)
		if err != nil {
			return nil, err
		}
		r, err := h.VM.Exec(ctx, a.Command, duration(calls.Exec, "timeout", a.Timeout))
		return execAnswer(r), err
	},
	calls.Expect: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.ExpectArgs](calls.Expect, raw)
		if err != nil {
			return nil, err
		}
		r, err := h.VM.Expect(ctx, a.Command, duration(calls.Expect, "timeout", a.Timeout), a.Contains)
		return execAnswer(r), err
	},
	calls.Check: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.ExecArgs](calls.Check, raw)
		if err != nil {
			return nil, err
		}
		r, err := h.VM.Exec(ctx, a.Command, duration(calls.Check, "timeout", a.Timeout))
		return calls.CheckAnswer{OK: err == nil && r.Exit == 0, ExecAnswer: execAnswer(r)}, err
	},
	calls.RunDetached: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.RunArgs](calls.RunDetached, raw)
		if err != nil {
			return nil, err
		}
		st, err := h.VM.Run(ctx, a.Command, duration(calls.RunDetached, "wait", a.Wait), a.Restart)
		return calls.RunAnswer{State: st.State, Exit: st.Exit, Seconds: st.Elapsed.Seconds(), Tail: st.Tail}, err
	},
	calls.ReadFile: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.ReadFileArgs](calls.ReadFile, raw)
		if err != nil {
			return nil, err
		}
		data, size, err := h.VM.ReadFile(ctx, a.Path, a.Offset, a.Max)
		return calls.ReadFileAnswer{Base64: base64.StdEncoding.EncodeToString(data), Size: size}, err
	},
	calls.WriteFile: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.WriteFileArgs](calls.WriteFile, raw)
		if err != nil {
			return nil, err
		}
		data := []byte(a.Text)
		if a.Base64 != "" {
			if data, err = base64.StdEncoding.DecodeString(a.Base64); err != nil {
				return nil, Failf("base64 is standard base64 with padding", "file.write: bad base64: %v", err)
			}
		}
		return calls.Empty{}, h.VM.WriteFile(ctx, a.Path, data)
	},
	calls.WaitBoot: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.WaitBootArgs](calls.WaitBoot, raw)
		if err != nil {
			return nil, err
		}
		ok, d, err := h.VM.WaitBoot(ctx, duration(calls.WaitBoot, "timeout", a.Timeout))
		return wait(ok, d), err
	},
	calls.ExecGUI: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.ExecGUIArgs](calls.ExecGUI, raw)
		if err != nil {
			return nil, err
		}
		r, err := h.VM.ExecGUI(ctx, a.Command, a.User)
		return calls.ExecGUIAnswer{Running: r.Running, Output: r.Output}, err
	},
	calls.Shot: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		if _, err := decode[calls.Empty](calls.Shot, raw); err != nil {
			return nil, err
		}
		f, err := h.VM.Shot(ctx)
		if err != nil {
			return nil, err
		}
		h.VM.CaptureShot(ctx, f, h.note(calls.Shot))
		return h.keep(f), nil
	},
	calls.WaitStill: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.WaitStillArgs](calls.WaitStill, raw)
		if err != nil {
			return nil, err
		}
		s, err := h.VM.WaitStill(ctx, duration(calls.WaitStill, "seconds", a.Seconds), duration(calls.WaitStill, "timeout", a.Timeout))
		return wait(s.OK, s.Elapsed), err
	},
	calls.WaitChange: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.WaitChangeArgs](calls.WaitChange, raw)
		if err != nil {
			return nil, err
		}
		s, err := h.VM.WaitChange(ctx, duration(calls.WaitChange, "timeout", a.Timeout))
		return wait(s.OK, s.Elapsed), err
	},
	calls.WaitWindow: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.WaitWindowArgs](calls.WaitWindow, raw)
		if err != nil {
			return nil, err
		}
		w, err := h.VM.WaitWindow(ctx, a.Window, a.Gone, a.User, duration(calls.WaitWindow, "timeout", a.Timeout))
		b := w.Window.Box
		return calls.WaitWindowAnswer{WaitAnswer: wait(w.OK, w.Elapsed), X: b.Min.X, Y: b.Min.Y, W: b.Dx(), H: b.Dy()}, err
	},
	calls.Type: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.TypeArgs](calls.Type, raw)
		if err != nil {
			return nil, err
		}
		return calls.Empty{}, h.VM.Type(ctx, a.Text)
	},
	calls.Press: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.PressArgs](calls.Press, raw)
		if err != nil {
			return nil, err
		}
		return calls.Empty{}, h.VM.Press(ctx, a.Key)
	},
	calls.Click: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.ClickArgs](calls.Click, raw)
		if err != nil {
			return nil, err
		}
		aimed := h.VM.CaptureAim(ctx, nil, h.clickNote(calls.Click, a.X, a.Y))
		err = h.VM.Click(ctx, a.X, a.Y, a.Button, a.Count, a.Frame)
		aimed.Finish(ctx, err == nil)
		return calls.Empty{}, err
	},
	calls.DoubleClick: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.PointArgs](calls.DoubleClick, raw)
		if err != nil {
			return nil, err
		}
		aimed := h.VM.CaptureAim(ctx, nil, h.clickNote(calls.DoubleClick, a.X, a.Y))
		err = h.VM.Click(ctx, a.X, a.Y, "left", 2, a.Frame)
		aimed.Finish(ctx, err == nil)
		return calls.Empty{}, err
	},
	calls.Drag: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.DragArgs](calls.Drag, raw)
		if err != nil {
			return nil, err
		}
		n := h.note(calls.Drag)
		n.Drag = &[2]image.Point{{X: a.X1, Y: a.Y1}, {X: a.X2, Y: a.Y2}}
		aimed := h.VM.CaptureAim(ctx, nil, n)
		err = h.VM.Drag(ctx, a.X1, a.Y1, a.X2, a.Y2, a.Frame)
		aimed.Finish(ctx, err == nil)
		return calls.Empty{}, err
	},
	calls.Move: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.PointArgs](calls.Move, raw)
		if err != nil {
			return nil, err
		}
		return calls.Empty{}, h.VM.Move(ctx, a.X, a.Y, a.Frame)
	},
	calls.ReadText: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		if _, err := decode[calls.Empty](calls.ReadText, raw); err != nil {
			return nil, err
		}
		rd, err := h.VM.Read(ctx)
		if err != nil {
			return nil, err
		}
		return readAnswer(h.VM, rd), nil
	},
	calls.CheckText: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		return h.findText(ctx, calls.CheckText, raw, false)
	},
	calls.ExpectText: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		return h.findText(ctx, calls.ExpectText, raw, true)
	},
	calls.WaitText: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.TextArgs](calls.WaitText, raw)
		if err != nil {
			return nil, err
		}
		w, err := h.VM.WaitText(ctx, a.Label, duration(calls.WaitText, "timeout", a.Timeout))
		if err != nil {
			return nil, err
		}
		digest := ""
		if w.Reading.Frame.Image != nil {
			digest = h.VM.Remember(w.Reading.Frame)
		}
		return calls.TextWaitAnswer{WaitAnswer: wait(w.Spot != nil, w.Elapsed), Text: textAnswer(w.Spot, digest)}, nil
	},
	calls.ClickLabel: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.ClickLabelArgs](calls.ClickLabel, raw)
		if err != nil {
			return nil, err
		}
		button := a.Button
		if button == "" {
			button = calls.DefaultString(calls.ClickLabel, "button")
		}
		count := a.Count
		if count == 0 {
			count = calls.DefaultInt(calls.ClickLabel, "count")
		}
		n := h.note(calls.ClickLabel)
		c, err := h.VM.ClickLabelNoted(ctx, a.Label, a.Kind, button, count, a.Frame, &n)
		if err != nil {
			return nil, err
		}
		return calls.ClickLabelAnswer{Source: c.Source, X: c.Point.X, Y: c.Point.Y, Text: c.Spot.Text, Frame: h.VM.Remember(c.Frame)}, nil
	},
	calls.Start: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.PowerArgs](calls.Start, raw)
		if err != nil {
			return nil, err
		}
		return finished(h.VM.Start(ctx, duration(calls.Start, "wait", a.Wait)))
	},
	calls.Stop: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.PowerArgs](calls.Stop, raw)
		if err != nil {
			return nil, err
		}
		return finished(h.VM.Stop(ctx, duration(calls.Stop, "wait", a.Wait)))
	},
	calls.Snapshot: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.SnapshotArgs](calls.Snapshot, raw)
		if err != nil {
			return nil, err
		}
		return finished(h.VM.Snapshot(ctx, a.Name, duration(calls.Snapshot, "wait", a.Wait)))
	},
	calls.Rollback: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.SnapshotArgs](calls.Rollback, raw)
		if err != nil {
			return nil, err
		}
		return finished(h.VM.Rollback(ctx, a.Name, duration(calls.Rollback, "wait", a.Wait)))
	},
	calls.SaveShot: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.SaveShotArgs](calls.SaveShot, raw)
		if err != nil {
			return nil, err
		}
		var f Frame
		if a.Image != "" {
			var ok bool
			if f, ok = h.Shot(a.Image); !ok {
				return nil, Failf(fmt.Sprintf("pass the image field of one of the last %d screen.shot() answers of this run", keptShots), "no screenshot %q kept in this run", a.Image)
			}
		} else if f, err = h.VM.Shot(ctx); err != nil {
			return nil, err
		} else {
			h.keep(f)
		}
		path, err := h.VM.c.SaveShot(f, a.Path)
		return calls.SaveShotAnswer{Path: path}, err
	},
	calls.Log: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.LogArgs](calls.Log, raw)
		if err != nil {
			return nil, err
		}
		if h.Log != nil {
			h.Log(a.Message)
		}
		return calls.Empty{}, nil
	},
	calls.Step: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.StepArgs](calls.Step, raw)
		if err != nil {
			return nil, err
		}
		if a.N < 1 || a.Of < a.N {
			return nil, Failf("steps count from 1 up to of", "step %d of %d", a.N, a.Of)
		}
		if h.Log != nil {
			h.Log(fmt.Sprintf("step %d/%d: %s", a.N, a.Of, a.Label))
		}
		if h.Step != nil {
			h.Step(a.N, a.Of, a.Label)
		}
		return calls.Empty{}, nil
	},
	calls.Recipe: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.RecipeArgs](calls.Recipe, raw)
		if err != nil {
			return nil, err
		}
		if h.Recipe == nil {
			return nil, Failf("", "recipes are not available here")
		}
		return h.Recipe(ctx, a.Name, a.Params)
	},
	calls.Sleep: func(h *Script, ctx context.Context, raw json.RawMessage) (any, error) {
		a, err := decode[calls.SleepArgs](calls.Sleep, raw)
		if err != nil {
			return nil, err
		}
		if a.Seconds < 0 || a.Seconds > 600 {
			return nil, Failf("prefer a wait* verb (screen.waitStill, waitBoot, ...) over sleeping", "sleep %g s: at most 600", a.Seconds)
		}
		select {
		case <-time.After(time.Duration(a.Seconds * float64(time.Second))):
			return calls.Empty{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	},
}

func execAnswer(r ExecResult) calls.ExecAnswer {
	return calls.ExecAnswer{Exit: r.Exit, Stdout: text(r.Stdout), Stderr: text(r.Stderr)}
}

// text makes guest output safe for JSON: invalid UTF-8 becomes U+FFFD.
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// finished turns a task that did not end, or ended badly, into an error:
// a script step waits for its task.
func finished(r TaskResult, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if !r.Done {
		return nil, Failf("raise the step's wait", "task still running after %s, upid=%s", r.Elapsed.Round(time.Second), r.UPID)
	}
	return calls.Empty{}, r.Err()
}

// Call answers one script call. The answer is JSON; a failure is an
// *Error whose message and hint the script sees.
func (h *Script) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	fn, ok := table[name]
	if !ok {
		return nil, Failf("see stdlib/poligon.d.ts for the calls a script can make", "unknown host call %q", name)
	}
	answer, err := fn(h, ctx, args)
	if err != nil {
		return nil, err
	}
	if raw, ok := answer.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(answer)
}

// Names lists every call the host answers (for docs and tests).
func Names() []string {
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	return names
}

// findText looks once for a text on screen; must makes its absence an
// error (expectText), else an answer with Found false (checkText).
func (h *Script) findText(ctx context.Context, call string, raw json.RawMessage, must bool) (any, error) {
	a, err := decode[calls.TextArgs](call, raw)
	if err != nil {
		return nil, err
	}
	s, rd, err := h.VM.CheckText(ctx, a.Label)
	if err != nil {
		return nil, err
	}
	if s == nil && must {
		return nil, notOnScreen(a.Label, rd)
	}
	return textAnswer(s, h.VM.Remember(rd.Frame)), nil
}

func box(r image.Rectangle) calls.Box { return calls.Box{X: r.Min.X, Y: r.Min.Y, W: r.Dx(), H: r.Dy()} }

func readAnswer(v *VM, rd Reading) calls.ReadAnswer {
	b := rd.Frame.Image.Bounds()
	a := calls.ReadAnswer{Frame: v.Remember(rd.Frame), Width: b.Dx(), Height: b.Dy(), Lines: []calls.TextLine{}}
	for _, l := range rd.Page.Lines {
		tl := calls.TextLine{Text: l.Text, Box: box(l.Box), Selected: l.Selected, Conf: l.Conf}
		for _, w := range l.Words {
			tl.Words = append(tl.Words, calls.TextWord{Text: w.Text, Box: box(w.Box), Conf: w.Conf})
		}
		a.Lines = append(a.Lines, tl)
	}
	return a
}

func textAnswer(s *Spot, frame string) calls.TextAnswer {
	if s == nil {
		return calls.TextAnswer{Frame: frame}
	}
	c := s.Centre()
	return calls.TextAnswer{Found: true, Text: s.Text, X: c.X, Y: c.Y, Box: box(s.Box), Selected: s.Selected, Frame: frame}
}

// notOnScreen is expectText's failure: what was looked for, and a glimpse
// of what the screen says instead.
func notOnScreen(label string, rd Reading) error {
	var seen []string
	for _, l := range rd.Page.Lines {
		if len(seen) == 6 {
			seen = append(seen, "...")
			break
		}
		seen = append(seen, fmt.Sprintf("%q", l.Text))
	}
	what := "no text at all"
	if len(seen) > 0 {
		what = "text such as " + strings.Join(seen, ", ")
	}
	return Failf("wait for it with screen.waitText, or check the label against screen.read()", "text %q is not on the screen (OCR read %s)", label, what)
}
