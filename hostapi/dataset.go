package hostapi

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/hostapi/calls"
	"github.com/poligon/poligon/internal/dataset"
	"github.com/poligon/poligon/internal/logs"
)

// The training-dataset capture (README: Training dataset). With a Dataset
// in Env every console frame a tool or script shows or aims at is also
// saved: the full frame, the guest's AT-SPI dump and the OCR words, one
// index line. The rules live here, for tools and scripts alike:
//
//   - order: (the screen settled) frame, dump, a second look that flags
//     screen_changed when the screen moved meanwhile, then OCR of the
//     frame and the write. The VM's lock is held throughout.
//   - a click's or drag's frame is taken before the action (CaptureAim),
//     its OCR and write after it, so the action waits for the frame and
//     the dump only; a refused action keeps nothing.
//   - best effort: a tool's answer never depends on it. What fails is
//     logged and counted, never returned.
//   - a guest whose dump cannot be read for a user (no agent, no session,
//     no python3, no pyatspi) is not asked again for Dataset.Recall
//     (120 s): its shots keep the frame and OCR, atspi_error says why,
//     counted as no_session.
//   - the screen mode is set once per boot of the guest (Dataset.Mode).

// Dataset is the capture the app configured; nil in Env: no capture.
type Dataset struct {
	Writer *dataset.Writer
	Agent  string // the files' prefix; "" = the caller's owner
	Mode   string // the guest's screen mode (xrandr), WxH; "" leaves it alone
	// Recall is how long a guest whose dump could not be read is not asked
	// again; 0 = DefaultRecall.
	Recall time.Duration
	Log    *slog.Logger // nil: none

	mu     sync.Mutex
	guests map[string]*guestBoot // by VM (vmKey)
	noDump map[string]noDump     // by VM and user
}

// DefaultRecall is the manual's 120 s: a login brings a guest's dumps back
// without a restart, and a sessionless guest costs one attempt per period.
const DefaultRecall = 120 * time.Second

// guestBoot is what capture remembers of a guest's boot.
type guestBoot struct {
	boot     string // the boot the last answer came from
	modeBoot string // the boot the screen mode was set on
	mode     string // its outcome there
}

// noDump is a guest whose dump could not be read for a user, and why.
type noDump struct {
	until time.Time // asked again from then on
	why   string
}

//go:embed guestsh/atspi-dump.py
var atspiDumpPy []byte

//go:embed guestsh/atspi.sh
var atspiBody string

//go:embed guestsh/xrandr.sh
var xrandrBody string

var (
	atspiScript  = sessionScript + atspiBody
	xrandrScript = sessionScript + xrandrBody
	atspiDumpB64 = base64.StdEncoding.EncodeToString(atspiDumpPy)
)

// How long capture waits: for the screen to settle before an aimed frame,
// for the dump (the script's own deadline is 20 s, its kill 25 s), for an
// agent to answer at all.
const (
	captureStill   = 300 * time.Millisecond
	captureSettle  = 2 * time.Second
	dumpTimeout    = 35 * time.Second
	agentPingLimit = 3 * time.Second
)

// ShotNote is what a caller knows of a shot: where it comes from, its
// labels, and the action it was aimed for.
type ShotNote struct {
	// Origin is the tool or the script step that took the frame:
	// ui_screenshot, after_ui_click, vm_dataset_app:screen.shot.
	Origin string
	Intent string // the caller's stated goal
	// App, Locale and Theme override the guest's probes.
	App, Locale, Theme string
	User               string // whose session the dump is read from; default test

	Click       *image.Point // a click's point
	ClickSource string       // how the point was found: xy, ocr, elements, grounding
	Label       string       // the label a click by label looked for
	Drag        *[2]image.Point
}

// Capturing reports whether the caller's shots are captured.
func (c *Caller) Capturing() bool { return c.env.Dataset != nil }

// RequireIntent refuses an action with no stated goal while capturing: a
// click with no intent is not a training example, and thousands of them
// are worse than an early error. what names the action.
func (c *Caller) RequireIntent(intent, what string) error {
	if !c.Capturing() || strings.TrimSpace(intent) != "" {
		return nil
	}
	return Failf(fmt.Sprintf(`say what this %s is for: intent="open the Server Logs tab"`, what),
		"intent is required while the training dataset is captured: a %s with no stated goal is not a training example", what)
}

// Aimed is a captured frame waiting for its action: Finish keeps it (OCR
// and the write) once the action went, or drops it. A nil Aimed (no
// capture, or none possible) does nothing.
type Aimed struct {
	d       *Dataset
	v       *VM
	note    ShotNote
	frame   Frame
	dump    []byte // the dump script's JSON; nil without one
	why     string // why there is none
	changed *bool
	mode    string
	began   time.Time
	dumped  time.Duration // the dump's exec in the guest
}

// CaptureShot captures a frame already taken and shown (ui_screenshot,
// ui_see, a screenshot after an action).
func (v *VM) CaptureShot(ctx context.Context, f Frame, n ShotNote) {
	v.CaptureAim(ctx, &f, n).Finish(ctx, true)
}

// CaptureAim captures the frame an action aims at, before the action:
// f when the caller already holds it (the frame a label was found on),
// else a frame of the settled screen. Finish after the action.
func (v *VM) CaptureAim(ctx context.Context, f *Frame, n ShotNote) *Aimed {
	d := v.c.env.Dataset
	if d == nil || f != nil && f.Image == nil {
		return nil
	}
	if err := d.Writer.Room(); err != nil { // counted as no_space
		d.log(ctx, "dataset shot skipped", "origin", n.Origin, "vmid", v.info.VMID, "outcome", dataset.Outcome(err), "err", err)
		return nil
	}
	if n.User == "" {
		n.User = calls.DefaultString(calls.ExecGUI, "user")
	}
	a := &Aimed{d: d, v: v, note: n, began: time.Now()}
	remembered, asking := d.remembered(v.vmKey(), n.User)
	if asking && d.Mode != "" && d.needsMode(v.vmKey()) {
		d.setMode(ctx, v, n.User) // before the frame: the mode change is not in it
	}
	if f != nil {
		a.frame = *f
	} else {
		if n.Click != nil || n.Drag != nil {
			v.WaitStill(ctx, captureStill, captureSettle) // not settled in time: the second look tells
		}
		shot, err := v.Shot(ctx)
		if err != nil {
			d.Writer.Counters.Failed.Add(1)
			d.log(ctx, "dataset shot failed", "origin", n.Origin, "vmid", v.info.VMID, "outcome", "failed", "err", err)
			return nil
		}
		a.frame = shot
	}
	if asking {
		start := time.Now()
		a.dump, a.why = d.readDump(ctx, v, n.User)
		a.dumped = time.Since(start)
	} else {
		a.why = remembered.why + " (remembered from an earlier shot)"
		d.Writer.Counters.NoSession.Add(1)
	}
	if again, err := v.Shot(ctx); err == nil {
		changed := frameChange(a.frame, again)
		a.changed = &changed
	}
	a.mode = d.modeNow(v.vmKey())
	return a
}

// Finish keeps the aimed shot when its action went (acted), reading its
// text and writing it; a refused action keeps nothing.
func (a *Aimed) Finish(ctx context.Context, acted bool) {
	if a == nil {
		return
	}
	d, v, n := a.d, a.v, a.note
	if !acted {
		d.log(ctx, "dataset shot dropped: the action did not go", "origin", n.Origin, "vmid", v.info.VMID)
		return
	}
	png, _, err := a.frame.PNG(1)
	if err != nil {
		d.Writer.Counters.Failed.Add(1)
		d.log(ctx, "dataset shot failed", "origin", n.Origin, "vmid", v.info.VMID, "outcome", "failed", "err", err)
		return
	}
	read := time.Now()
	words, ocrErr := v.captureWords(ctx, a.frame)
	ocrTook := time.Since(read)
	c := v.c
	l := dataset.Line{
		Click: point(n.Click), ClickSource: n.ClickSource, Label: n.Label, Intent: strings.TrimSpace(n.Intent),
		App: n.App, Locale: n.Locale, Theme: n.Theme,
		Bench: c.bench, Origin: n.Origin, Req: logs.Req(ctx), VMID: v.info.VMID, Node: v.info.Node,
		ScreenChanged: a.changed, ATSPIError: a.why, OCRError: ocrErr, Mode: a.mode,
	}
	if n.Drag != nil {
		l.Drag = &dataset.Drag{From: [2]int{n.Drag[0].X, n.Drag[0].Y}, To: [2]int{n.Drag[1].X, n.Drag[1].Y}}
	}
	dump := a.dump
	var probes struct {
		App, Theme string
		Visited    int
		Took       map[string]*float64 // the dump's phases, seconds
	}
	if dump != nil {
		json.Unmarshal(dump, &probes)
		if l.App == "" {
			l.App = probes.App
		}
		if l.Theme == "" {
			l.Theme = probes.Theme
		}
	}
	agent := d.Agent
	if agent == "" {
		agent = dataset.SafeName(c.owner)
	}
	shot := dataset.Shot{
		Session: dataset.SessionName(dataset.BackendID(c.lockNS), c.bench, v.info.VMID, c.owner, time.Now()),
		Agent:   agent, PNG: png, ATSPI: dump, OCR: words, Line: l,
	}
	write := time.Now()
	written, err := d.Writer.Write(shot)
	if err != nil {
		d.log(ctx, "dataset shot failed", "origin", n.Origin, "vmid", v.info.VMID, "outcome", dataset.Outcome(err), "err", err)
		return
	}
	d.log(ctx, "dataset shot", "shot", written.Shot, "origin", n.Origin, "vmid", v.info.VMID,
		"atspi_widgets", written.ATSPIWidgets, "atspi_visited", probes.Visited, "atspi_took", tookText(probes.Took), "atspi_error", written.ATSPIError,
		"screen_changed", a.changed != nil && *a.changed, "dump_ms", a.dumped.Milliseconds(), "ocr_ms", ocrTook.Milliseconds(),
		"write_ms", time.Since(write).Milliseconds(), "ms", time.Since(a.began).Milliseconds(), "outcome", "written")
}

// tookText renders the dump's phases, "python=1.2 import=2.0 walk=3.1".
func tookText(took map[string]*float64) string {
	var parts []string
	for _, phase := range []string{"python", "import", "walk", "theme"} {
		if s := took[phase]; s != nil {
			parts = append(parts, fmt.Sprintf("%s=%.2f", phase, *s))
		}
	}
	return strings.Join(parts, " ")
}

func point(p *image.Point) *[2]int {
	if p == nil {
		return nil
	}
	return &[2]int{p.X, p.Y}
}

// captureWords reads every word of the frame, or says why it could not.
func (v *VM) captureWords(ctx context.Context, f Frame) ([]dataset.Word, string) {
	r, err := v.ocr()
	if err != nil {
		return nil, err.Error()
	}
	rd, err := v.readFrame(ctx, r, f)
	if err != nil {
		return nil, err.Error()
	}
	var words []dataset.Word
	for _, l := range rd.Page.Lines {
		for _, w := range l.Words {
			words = append(words, dataset.Word{Box: w.Box, Text: w.Text, Conf: w.Conf})
		}
	}
	return words, ""
}

// readDump runs the dump script in the guest and answers its JSON, or why
// there is none. A guest that cannot give one is remembered.
func (d *Dataset) readDump(ctx context.Context, v *VM, user string) ([]byte, string) {
	key := v.vmKey()
	if why, ok := v.agentAnswers(ctx); !ok {
		d.forget(key, user, why)
		return nil, why
	}
	res, err := v.execArgs(ctx, "/bin/sh", []string{"-c", atspiScript, "poligon-atspi", user, atspiDumpB64}, dumpTimeout, "AT-SPI dump")
	if err != nil {
		return nil, "the dump did not finish: " + err.Error()
	}
	boot, body := bootLine(res.Stdout)
	d.sawBoot(key, boot)
	stderr := strings.TrimSpace(string(res.Stderr))
	switch res.Exit {
	case 0:
		return body, ""
	case 3, 4, 7, 8: // the session, python3, pyatspi or the bus: not there for a while
		why := stderr
		if res.Exit == 3 {
			var e struct{ Error string }
			json.Unmarshal(body, &e)
			why = e.Error
		}
		if why == "" {
			why = fmt.Sprintf("the dump script exited %d", res.Exit)
		}
		d.forget(key, user, why)
		return nil, why
	}
	return nil, fmt.Sprintf("the dump script exited %d: %s", res.Exit, shorten(stderr, 200))
}

// agentAnswers pings the guest agent briefly: an installer, a boot menu or
// a physical machine has none, and a shot must not wait for it.
func (v *VM) agentAnswers(ctx context.Context) (string, bool) {
	g, err := v.guest()
	if err != nil {
		return err.Error(), false
	}
	pctx, cancel := context.WithTimeout(ctx, agentPingLimit)
	defer cancel()
	if err := g.GuestPing(pctx, v.info.VMID); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backends.ErrAgentNotRunning) || errors.Is(err, backends.ErrNotRunning) || errors.Is(err, backends.ErrAgentDisabled) {
			return fmt.Sprintf("no guest agent answers in vmid %d: %v", v.info.VMID, err), false
		}
		return v.agentError(err).Error(), false
	}
	return "", true
}

// setMode sets the guest's screen mode and remembers the outcome for the
// boot it was set on.
func (d *Dataset) setMode(ctx context.Context, v *VM, user string) {
	if _, ok := v.agentAnswers(ctx); !ok {
		return // readDump says so and remembers it
	}
	res, err := v.execArgs(ctx, "/bin/sh", []string{"-c", xrandrScript, "poligon-xrandr", user, d.Mode}, 30*time.Second, "screen mode")
	if err != nil || res.Exit != 0 {
		return // no session yet: set when there is one
	}
	boot, body := bootLine(res.Stdout)
	mode, _ := strings.CutPrefix(strings.TrimSpace(string(body)), "mode ")
	d.mu.Lock()
	g := d.guestLocked(v.vmKey())
	g.boot, g.modeBoot, g.mode = boot, boot, mode
	d.mu.Unlock()
	d.log(ctx, "dataset screen mode", "vmid", v.info.VMID, "mode", d.Mode, "outcome", mode)
}

// bootLine splits the scripts' first line, "boot <id>", from the rest.
func bootLine(out []byte) (string, []byte) {
	first, rest, _ := bytes.Cut(out, []byte("\n"))
	boot, ok := strings.CutPrefix(string(first), "boot ")
	if !ok {
		return "", out
	}
	return strings.TrimSpace(boot), rest
}

func (d *Dataset) guestLocked(key string) *guestBoot {
	if d.guests == nil {
		d.guests = map[string]*guestBoot{}
	}
	g, ok := d.guests[key]
	if !ok {
		g = &guestBoot{}
		d.guests[key] = g
	}
	return g
}

// remembered answers why the guest gave user no dump lately, and whether
// to ask it (again).
func (d *Dataset) remembered(key, user string) (noDump, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nd, ok := d.noDump[key+"\x00"+user]
	if !ok || !time.Now().Before(nd.until) {
		delete(d.noDump, key+"\x00"+user)
		return noDump{}, true
	}
	return nd, false
}

// forget stops asking a guest for user's dumps for Recall, saying why;
// its shot counts as no_session.
func (d *Dataset) forget(key, user, why string) {
	d.Writer.Counters.NoSession.Add(1)
	recall := d.Recall
	if recall <= 0 {
		recall = DefaultRecall
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.noDump == nil {
		d.noDump = map[string]noDump{}
	}
	d.noDump[key+"\x00"+user] = noDump{until: time.Now().Add(recall), why: why}
}

// needsMode says whether the guest's current boot has no mode set yet.
func (d *Dataset) needsMode(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.guestLocked(key)
	return g.mode == "" || g.boot != g.modeBoot
}

// sawBoot notes the boot a dump came from: a new one wants its mode set.
func (d *Dataset) sawBoot(key, boot string) {
	if boot == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.guestLocked(key).boot = boot
}

// modeNow answers the mode outcome of the guest's current boot, "" when
// none was set on it.
func (d *Dataset) modeNow(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.guestLocked(key)
	if g.mode == "" || g.boot != g.modeBoot {
		return ""
	}
	return g.mode
}

func (d *Dataset) log(ctx context.Context, msg string, args ...any) {
	if d.Log != nil {
		d.Log.InfoContext(ctx, msg, args...)
	}
}
