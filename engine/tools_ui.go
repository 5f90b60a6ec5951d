package engine

import (
	"context"
	"fmt"
	"image"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
)

// The console tools: screenshots, waits on the screen, keyboard and mouse.

type screenshotArgs struct {
	VMID   int     `json:"vmid" min:"1"`
	Path   string  `json:"path,omitempty" desc:"also save the full-size PNG here, in the evidence directory"`
	Scale  float64 `json:"scale,omitempty" desc:"downscale (0.5: a cheap look); coordinates stay full-size" min:"0" max:"1"`
	Region string  `json:"region,omitempty" desc:"one X11 window: its id, or part of its title or class (needs xdotool, xwininfo)"`
	User   string  `json:"user,omitempty" desc:"whose X session region looks in" default:"test"`
	lookLabels
}

// The training dataset's labels of a shot (README: Training dataset).
// Only a server that captures lists them (capture:""); one that does not
// accepts and ignores them, so an agent may always send them.

// datasetLabels override the guest's probes.
type datasetLabels struct {
	App    string `json:"app,omitempty" desc:"dataset: the application shown, when you know better than the guest" capture:""`
	Locale string `json:"locale,omitempty" desc:"dataset: its locale (ru_RU.UTF-8, ru)" capture:""`
	Theme  string `json:"theme,omitempty" desc:"dataset: light or dark" capture:""`
}

// lookLabels label a look at the screen: its intent is recorded, not
// required.
type lookLabels struct {
	Intent string `json:"intent,omitempty" desc:"dataset: what you look for" capture:""`
	datasetLabels
}

// actLabels label an action and the shots around it.
type actLabels struct {
	Intent string `json:"intent,omitempty" desc:"dataset: the goal of this action, e.g. \"press Apply\" (ui_click, ui_click_label, ui_drag and ui_type refuse to act without it)" capture:""`
	User   string `json:"user,omitempty" desc:"dataset: whose session the accessibility tree is read from" default:"test" capture:""`
	datasetLabels
}

// note is a look's shot note.
func (l lookLabels) note(origin, user string) hostapi.ShotNote {
	return hostapi.ShotNote{Origin: origin, Intent: l.Intent, App: l.App, Locale: l.Locale, Theme: l.Theme, User: user}
}

// note is an action's shot note.
func (l actLabels) note(origin string) hostapi.ShotNote {
	return hostapi.ShotNote{Origin: origin, Intent: l.Intent, App: l.App, Locale: l.Locale, Theme: l.Theme, User: l.User}
}

type waitForArgs struct {
	VMID       int     `json:"vmid" min:"1"`
	Window     string  `json:"window,omitempty" desc:"part of a window's title or class; leave out to wait for a still screen"`
	Gone       bool    `json:"gone,omitempty" desc:"wait until the window is gone" default:"false"`
	Timeout    float64 `json:"timeout,omitempty" desc:"seconds" call:"screen.waitWindow timeout" min:"0" max:"max_wait"`
	User       string  `json:"user,omitempty" desc:"whose X session to look in" default:"test"`
	Screenshot bool    `json:"screenshot,omitempty" desc:"add a screenshot" default:"false"`
	Scale      float64 `json:"scale,omitempty" desc:"downscale the screenshot" min:"0" max:"1"`
	lookLabels
}

// afterArgs are the arguments every input tool takes to answer with the
// screen after its action.
type afterArgs struct {
	Screenshot bool    `json:"screenshot,omitempty" desc:"answer with the screen after it, once settled" default:"false"`
	SettleMs   int     `json:"settle_ms,omitempty" desc:"the longest wait for it to settle" default:"3000" min:"0" max:"max_wait_ms"`
	Scale      float64 `json:"scale,omitempty" desc:"downscale the screenshot" min:"0" max:"1"`
	WaitWindow string  `json:"wait_window,omitempty" desc:"with screenshot: wait for a window whose title or class contains this"`
}

type clickArgs struct {
	VMID   int    `json:"vmid" min:"1"`
	X      int    `json:"x" desc:"full-size console pixels" min:"0"`
	Y      int    `json:"y" min:"0"`
	Button string `json:"button,omitempty" call:"mouse.click button" enum:"left,middle,right"`
	Count  int    `json:"count,omitempty" desc:"2: a double click" call:"mouse.click count" min:"1" max:"3"`
	Frame  string `json:"frame,omitempty" desc:"the frame: line you aimed from; refused if the screen changed near x,y since"`
	afterArgs
	actLabels
}

type dragArgs struct {
	VMID  int    `json:"vmid" min:"1"`
	X1    int    `json:"x1" desc:"start, full-size pixels" min:"0"`
	Y1    int    `json:"y1" min:"0"`
	X2    int    `json:"x2" desc:"end" min:"0"`
	Y2    int    `json:"y2" min:"0"`
	Frame string `json:"frame,omitempty" desc:"the frame: line you aimed from; refused if the screen changed near either end since"`
	afterArgs
	actLabels
}

type typeArgs struct {
	VMID int    `json:"vmid" min:"1"`
	Text string `json:"text" desc:"at most 4096 bytes, US layout; \\n is Enter"`
	afterArgs
	actLabels
}

type keyArgs struct {
	VMID int    `json:"vmid" min:"1"`
	Key  string `json:"key" desc:"qemu sendkey name: ret, tab, esc, spc, backspace, up, f2, ctrl-c, alt-f2, ctrl-alt-f2, ctrl-alt-delete"`
	afterArgs
	actLabels
}

func uiTools() []*Tool {
	return []*Tool{
		newTool(Def{Name: "ui_screenshot", Toolset: "ui", Screen: true, Title: "Take a screenshot",
			Description: "Screenshot of the VM console as an image, with a size line.",
			Summary:     "The console as an image with a size line; `path` saves the full PNG under the evidence directory",
			Effect:      destructiveOnce("path= saves a PNG in the evidence directory, replacing a file of that name")}, screenshot),
		newTool(Def{Name: "ui_wait_for", Toolset: "ui", Screen: true, Title: "Wait for a window or a still screen",
			Description: "Wait, instead of guessing a delay, for a window to show (gone=true: to go), or without window for the screen to stop changing: answers what happened after S s, or timeout.",
			Summary:     "Wait for a window (X11: xdotool finds it, xwininfo places it; neither is installed for you), or for the screen to settle",
			Effect:      readOnly("polls the screen or the window list; installs nothing (the hint says how)")}, waitFor),
		newTool(Def{Name: "ui_click", Toolset: "ui", Screen: true, Title: "Click",
			Description: "Click at console coordinates: move, press 300 ms, release. Answers ok, or with screenshot=true the screen after.",
			Summary:     "Move, press 300 ms, release",
			Effect:      runsInGuest("input to whatever has the pointer: it can close or confirm anything")}, click),
		newTool(Def{Name: "ui_drag", Toolset: "ui", Screen: true, Title: "Drag",
			Description: "Drag with the left button from x1,y1 to x2,y2.",
			Summary:     "Drag with the left button",
			Effect:      runsInGuest("input to whatever has the pointer")}, drag),
		newTool(Def{Name: "ui_type", Toolset: "ui", Screen: true, Title: "Type text",
			Description: "Type text as keysym events, holding Shift for capitals and shifted US symbols.",
			Summary:     "Type text (US layout, Shift for capitals and shifted symbols)",
			Effect:      runsInGuest("input to whatever has the focus (a shell runs what it gets)"),
			Redact:      []string{"text"}}, typeText),
		newTool(Def{Name: "ui_key", Toolset: "ui", Screen: true, Title: "Press a key",
			Description: "Press a key or combination.",
			Summary:     "A key or combination by qemu sendkey name: `ret`, `tab`, `ctrl-alt-f2`",
			Effect:      runsInGuest("input to whatever has the focus (ctrl-alt-delete reboots)")}, key),
	}
}

// sizeLine names an image's size, and the full size when scaled: coordinates
// are always full-size.
func sizeLine(full, shown image.Rectangle) string {
	if full.Size() == shown.Size() {
		return fmt.Sprintf("%dx%d", full.Dx(), full.Dy())
	}
	scale := float64(shown.Dx()) / float64(full.Dx())
	return fmt.Sprintf("%dx%d (scale %s of %dx%d)", shown.Dx(), shown.Dy(), strconv.FormatFloat(scale, 'g', 3, 64), full.Dx(), full.Dy())
}

// imageResult renders a frame: the size line (plus lines) and the image
// (PNG, or a PiKVM's own JPEG when shown whole).
func imageResult(f hostapi.Frame, scale float64, lines ...string) (*mcp.CallToolResult, error) {
	data, mime, shown, err := f.Encode(scale)
	if err != nil {
		return nil, err
	}
	head := sizeLine(f.Image.Bounds(), shown)
	for _, l := range lines {
		head += "\n" + l
	}
	return withImage(text("%s", head), data, mime), nil
}

func screenshot(ctx context.Context, c *Call, in *screenshotArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		lk, err := look(ctx, c, v, in.Path, in.Region, in.User)
		if err != nil {
			return nil, err
		}
		lines, err := lk.save(c, in.Path)
		if err != nil {
			return nil, err
		}
		lines = append(lines, "timing: "+lk.full.Timing())
		res, err := shotResultOf(ctx, c, v, lk.full, lk.shown, in.Scale, lines...)
		if err == nil {
			v.CaptureShot(ctx, lk.full, in.note(c.Tool.Name, in.User))
		}
		return res, err
	})
}

// aLook is a screenshot as ui_screenshot and ui_see take it: the full
// frame, what is shown of it (a window with region=), and the window line.
type aLook struct {
	full, shown hostapi.Frame
	window      *hostapi.Window
	lines       []string
}

// look takes the screenshot, refusing a bad path before any work.
func look(ctx context.Context, c *Call, v *hostapi.VM, path, region, user string) (aLook, error) {
	if path != "" {
		if _, err := hostapi.EvidencePath(c.Server.app.Env.Evidence, path); err != nil {
			return aLook{}, err
		}
	}
	f, err := v.Shot(ctx)
	if err != nil {
		return aLook{}, err
	}
	lk := aLook{full: f, shown: f}
	if region != "" {
		w, err := v.FindWindow(ctx, region, user)
		if err != nil {
			return aLook{}, err
		}
		if lk.shown, err = crop(f, w); err != nil {
			return aLook{}, err
		}
		box := w.Box.Intersect(f.Image.Bounds())
		lk.window = &w
		lk.lines = append(lk.lines, fmt.Sprintf("window %s %q at %d,%d %dx%d", w.ID, w.Title, box.Min.X, box.Min.Y, box.Dx(), box.Dy()))
	}
	return lk, nil
}

// save writes the full frame to path when one was given (last: a refused
// call saves nothing) and answers the look's lines.
func (lk aLook) save(c *Call, path string) ([]string, error) {
	if path == "" {
		return lk.lines, nil
	}
	saved, err := c.Caller.SaveShot(lk.full, path)
	if err != nil {
		return nil, err
	}
	return append([]string{"saved " + saved}, lk.lines...), nil
}

func waitFor(ctx context.Context, c *Call, in *waitForArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		timeout := time.Duration(in.Timeout * float64(time.Second))
		var line string
		if in.Window != "" {
			w, err := v.WaitWindow(ctx, in.Window, in.Gone, in.User, timeout)
			if err != nil {
				return nil, err
			}
			switch {
			case !w.OK:
				line = fmt.Sprintf("timeout after %.1f s", w.Elapsed.Seconds())
			case in.Gone:
				line = fmt.Sprintf("window %q gone after %.1f s", in.Window, w.Elapsed.Seconds())
			case w.Window.Unplaced != nil:
				line = fmt.Sprintf("window %q after %.1f s, at an unknown position: %v\nhint: %s", w.Window.Title, w.Elapsed.Seconds(), w.Window.Unplaced, hostapi.HintOf(w.Window.Unplaced))
			default:
				b := w.Window.Box
				line = fmt.Sprintf("window %q after %.1f s at %d,%d %dx%d", w.Window.Title, w.Elapsed.Seconds(), b.Min.X, b.Min.Y, b.Dx(), b.Dy())
			}
		} else {
			s, err := v.WaitStill(ctx, 0, timeout)
			if err != nil {
				return nil, err
			}
			line = fmt.Sprintf("screen settled after %.1f s", s.Elapsed.Seconds())
			if !s.OK {
				line = fmt.Sprintf("timeout after %.1f s: the screen did not settle", s.Elapsed.Seconds())
			}
		}
		if !in.Screenshot {
			return text("%s", line), nil
		}
		f, err := v.Shot(ctx)
		if err != nil {
			return nil, err
		}
		res, err := shotResult(ctx, c, v, f, in.Scale, line, "timing: "+f.Timing())
		if err == nil {
			v.CaptureShot(ctx, f, in.note(c.Tool.Name, in.User))
		}
		return res, err
	})
}

// afterAction adds the screen after an input action when asked: as soon as
// it settles (at most settle_ms) or the awaited window (of user's session)
// shows. The training dataset captures it as after_<tool>, labelled by
// note.
func afterAction(ctx context.Context, c *Call, v *hostapi.VM, res *mcp.CallToolResult, a afterArgs, user string, note hostapi.ShotNote) (*mcp.CallToolResult, error) {
	if !a.Screenshot {
		return res, nil
	}
	timing, err := settle(ctx, v, a, user)
	if err != nil {
		return nil, err
	}
	f, err := v.Shot(ctx)
	if err != nil {
		return nil, err
	}
	img, err := shotResult(ctx, c, v, f, a.Scale, timing+", "+f.Timing())
	if err != nil {
		return nil, err
	}
	note.Origin = "after_" + c.Tool.Name
	v.CaptureShot(ctx, f, note)
	res.Content = append(res.Content, img.Content...)
	return res, nil
}

// shotResult is every screenshot answer: the image with its size and frame
// lines, and the element list too when the server sees always
// (POLIGON_MCP_SEE_ALWAYS); a model that fails then costs a line, not the
// screenshot.
func shotResult(ctx context.Context, c *Call, v *hostapi.VM, f hostapi.Frame, scale float64, lines ...string) (*mcp.CallToolResult, error) {
	return shotResultOf(ctx, c, v, f, f, scale, lines...)
}

// shotResultOf shows part of the frame full (a window), which names the
// frame: coordinates and frame= are always the full frame's.
func shotResultOf(ctx context.Context, c *Call, v *hostapi.VM, full, shown hostapi.Frame, scale float64, lines ...string) (*mcp.CallToolResult, error) {
	lines = append(lines, frameLine(v, full))
	if e := c.Server.app.Env.Eyes; e != nil && e.SeeAlways {
		if s, err := v.See(ctx, full, nil); err == nil {
			lines = append(lines, seeingText(s, ""))
		} else {
			lines = append(lines, "elements: unavailable: "+err.Error())
		}
	}
	return imageResult(shown, scale, lines...)
}

// The click and the drag capture their frame before they act (the
// training pair: the screen and where it was clicked), and it is kept
// only when they did.

func click(ctx context.Context, c *Call, in *clickArgs) (*mcp.CallToolResult, error) {
	if err := c.Caller.RequireIntent(in.Intent, "click"); err != nil {
		return nil, err
	}
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		n := in.note(c.Tool.Name)
		n.Click, n.ClickSource = &image.Point{X: in.X, Y: in.Y}, "xy"
		aimed := v.CaptureAim(ctx, nil, n)
		err := v.Click(ctx, in.X, in.Y, in.Button, in.Count, in.Frame)
		aimed.Finish(ctx, err == nil)
		if err != nil {
			return nil, err
		}
		return afterAction(ctx, c, v, text("ok"), in.afterArgs, "", in.note(""))
	})
}

func drag(ctx context.Context, c *Call, in *dragArgs) (*mcp.CallToolResult, error) {
	if err := c.Caller.RequireIntent(in.Intent, "drag"); err != nil {
		return nil, err
	}
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		n := in.note(c.Tool.Name)
		n.Drag = &[2]image.Point{{X: in.X1, Y: in.Y1}, {X: in.X2, Y: in.Y2}}
		aimed := v.CaptureAim(ctx, nil, n)
		err := v.Drag(ctx, in.X1, in.Y1, in.X2, in.Y2, in.Frame)
		aimed.Finish(ctx, err == nil)
		if err != nil {
			return nil, err
		}
		return afterAction(ctx, c, v, text("ok"), in.afterArgs, "", in.note(""))
	})
}

func typeText(ctx context.Context, c *Call, in *typeArgs) (*mcp.CallToolResult, error) {
	if err := c.Caller.RequireIntent(in.Intent, "typing"); err != nil {
		return nil, err
	}
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		if err := v.Type(ctx, in.Text); err != nil {
			return nil, err
		}
		return afterAction(ctx, c, v, text("ok"), in.afterArgs, "", in.note(""))
	})
}

func key(ctx context.Context, c *Call, in *keyArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		if err := v.Press(ctx, in.Key); err != nil {
			return nil, err
		}
		return afterAction(ctx, c, v, text("ok"), in.afterArgs, "", in.note(""))
	})
}
