package engine

import (
	"context"
	"fmt"
	"image"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/hostapi"
)

// The eyes: reading the screen by OCR (ui_read) and by a vision model
// (ui_see), and clicking by label (ui_click_label). Every answer names its
// frame, which ui_click, ui_drag and ui_click_label take back as frame= to
// refuse acting on a screen that has changed.

type readArgs struct {
	VMID  int  `json:"vmid" min:"1"`
	Boxes bool `json:"boxes,omitempty" desc:"add each line's w and h" default:"false"`
}

type seeArgs struct {
	VMID    int     `json:"vmid" min:"1"`
	Path    string  `json:"path,omitempty" desc:"also save the full-size PNG here, in the evidence directory"`
	Scale   float64 `json:"scale,omitempty" desc:"downscale the image; detection and coordinates stay full-size" min:"0" max:"1"`
	Region  string  `json:"region,omitempty" desc:"one X11 window: its id, or part of its title or class (not cached)"`
	User    string  `json:"user,omitempty" desc:"whose X session region looks in" default:"test"`
	NoImage bool    `json:"no_image,omitempty" desc:"the element list only" default:"false"`
	lookLabels
}

type clickLabelArgs struct {
	VMID   int    `json:"vmid" min:"1"`
	Label  string `json:"label" desc:"the text it shows (fuzzy, case-folded; Cyrillic and Latin look-alikes match)"`
	Kind   string `json:"kind,omitempty" desc:"narrow the match (icon skips OCR)" enum:"button,link,field,checkbox,radio,tab,menu,menuitem,list item,icon,text,window,other"`
	Button string `json:"button,omitempty" call:"mouse.clickLabel button" enum:"left,middle,right"`
	Count  int    `json:"count,omitempty" desc:"2: a double click" call:"mouse.clickLabel count" min:"1" max:"3"`
	Frame  string `json:"frame,omitempty" desc:"the frame: line you aimed from; refused if the target changed since"`
	Image  bool   `json:"image,omitempty" desc:"with screenshot: add the image to the element list" default:"false"`
	afterArgs
	actLabels
}

func eyesTools() []*Tool {
	return []*Tool{
		newTool(Def{Name: "ui_read", Toolset: "ui", Screen: true, Reads: "text", Title: "Read the screen's text",
			Description: "Screen text by OCR as TSV: x, y (its centre, full-size pixels), label, and selected for a highlighted row. No image; lines read before are cached.",
			Summary:     "The screen's text by OCR (tesseract): TSV `x, y, label` per word group, centres in console pixels; a highlighted row gets `selected`; `boxes=true` adds w, h. No image",
			Effect:      readOnly("reads the screen's text by OCR, on this server")}, readText),
		newTool(Def{Name: "ui_see", Toolset: "ui", Screen: true, Reads: "elements", Title: "See the screen's elements",
			Description: "Screenshot plus the vision model's UI elements as TSV: x, y, type, label (full-size pixels). Lists are cached by frame.",
			Summary:     "Screenshot plus the vision model's element list: TSV `x, y, type, label` in console pixels (`elements: 0` when none); cached by frame",
			Effect:      destructiveOnce("path= replaces a PNG as ui_screenshot does; the screen goes to the vision model's endpoint").reaching()}, see),
		newTool(Def{Name: "ui_click_label", Toolset: "ui", Screen: true, Title: "Click by label",
			Description: "Click an element by its visible label: OCR first, then the vision model's elements, then the grounding model (icons); several equal matches are an error listing them. Answers the point and its source; screenshot=true adds the screen after (elements; image=true for the image).",
			Summary:     "Click by visible label: OCR, then the frame's cached element list, then the grounding model; answers the point and `source: ocr\\|elements\\|grounding`",
			Effect:      runsInGuest("input to whatever is under the label: it can close or confirm anything")}, clickLabel),
	}
}

// frameLine names the frame an answer shows, for frame= later.
func frameLine(v *hostapi.VM, f hostapi.Frame) string {
	return "frame: " + v.Remember(f)
}

func readText(ctx context.Context, c *Call, in *readArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		rd, err := v.Read(ctx)
		if err != nil {
			return nil, err
		}
		return text("%s", readingText(v, rd, in.Boxes)), nil
	})
}

// readingText renders an OCR reading: the size and frame, the TSV, and
// what it cost.
func readingText(v *hostapi.VM, rd hostapi.Reading, boxes bool) string {
	head := []string{"x", "y", "label"}
	if boxes {
		head = []string{"x", "y", "w", "h", "label"}
	}
	rows := [][]string{head}
	for _, l := range rd.Page.Lines {
		c := l.Centre()
		row := []string{strconv.Itoa(c.X), strconv.Itoa(c.Y)}
		if boxes {
			row = append(row, strconv.Itoa(l.Box.Dx()), strconv.Itoa(l.Box.Dy()))
		}
		row = append(row, l.Text)
		if l.Selected {
			row = append(row, "selected")
		}
		rows = append(rows, row)
	}
	body := tsv(rows)
	if len(rd.Page.Lines) == 0 {
		body = "no text found\n"
	}
	return fmt.Sprintf("%s\n%s%stiming: %s, ocr %.2f s (%d lines: %d pieces read, %d from the glyph atlas, %d from cache)",
		rd.Frame.Size(), body, frameLine(v, rd.Frame)+"\n", rd.Frame.Timing(), rd.Page.Took.Seconds(), len(rd.Page.Lines), rd.Page.Read, rd.Page.Grid, rd.Page.Cached)
}

// seeingText renders an element list and its timing line, which starts
// with the frame's when given (an answer that has no other).
func seeingText(s hostapi.Seeing, frame string) string {
	lines := []string{hostapi.ElementLines(s.Elements)}
	if !s.Complete {
		lines = append(lines, fmt.Sprintf("elements: incomplete (%s): the list may miss elements and was not cached", s.Problem))
	}
	source := "model"
	if s.Cached {
		source = "cached"
	}
	if frame != "" {
		frame += ", "
	}
	lines = append(lines, fmt.Sprintf("timing: %svision %.1f s (source: %s)", frame, s.Took.Seconds(), source))
	return strings.Join(lines, "\n")
}

func see(ctx context.Context, c *Call, in *seeArgs) (*mcp.CallToolResult, error) {
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		lk, err := look(ctx, c, v, in.Path, in.Region, in.User)
		if err != nil {
			return nil, err
		}
		s, err := v.See(ctx, lk.full, lk.window)
		if err != nil {
			return nil, err
		}
		lines, err := lk.save(c, in.Path)
		if err != nil {
			return nil, err
		}
		lines = append(lines, frameLine(v, lk.full), seeingText(s, lk.full.Timing()))
		v.CaptureShot(ctx, lk.full, in.note(c.Tool.Name, in.User))
		if in.NoImage {
			return text("%s\n%s", lk.full.Size(), strings.Join(lines, "\n")), nil
		}
		return imageResult(lk.shown, in.Scale, lines...)
	})
}

// crop cuts a window out of a frame.
func crop(f hostapi.Frame, w hostapi.Window) (hostapi.Frame, error) {
	box := w.Box.Intersect(f.Image.Bounds())
	if box.Empty() {
		return hostapi.Frame{}, hostapi.Failf("take the full frame instead", "window %s (%q) is off screen", w.ID, w.Title)
	}
	sub := image.NewRGBA(image.Rect(0, 0, box.Dx(), box.Dy()))
	for y := 0; y < box.Dy(); y++ {
		copy(sub.Pix[y*sub.Stride:], f.Image.Pix[(box.Min.Y+y)*f.Image.Stride+box.Min.X*4:(box.Min.Y+y)*f.Image.Stride+box.Max.X*4])
	}
	return hostapi.Frame{Image: sub, At: f.At}, nil
}

func clickLabel(ctx context.Context, c *Call, in *clickLabelArgs) (*mcp.CallToolResult, error) {
	if err := c.Caller.RequireIntent(in.Intent, "click"); err != nil {
		return nil, err
	}
	return withVM(ctx, c, in.VMID, func(v *hostapi.VM) (*mcp.CallToolResult, error) {
		n := in.note(c.Tool.Name)
		lc, err := v.ClickLabelNoted(ctx, in.Label, in.Kind, in.Button, in.Count, in.Frame, &n)
		if err != nil {
			return nil, err
		}
		res := text("clicked %q at %d,%d (source: %s)\n%s", lc.Spot.Text, lc.Point.X, lc.Point.Y, lc.Source, frameLine(v, lc.Frame))
		if !in.Screenshot && !in.Image {
			return res, nil
		}
		n.Origin = "after_" + c.Tool.Name
		return afterLook(ctx, v, res, in.afterArgs, in.Image, n)
	})
}

// afterLook answers the screen after an action as text: the element list
// when a vision model is set up, else what OCR reads, plus the image when
// asked for. The training dataset captures the frame under note.
func afterLook(ctx context.Context, v *hostapi.VM, res *mcp.CallToolResult, a afterArgs, withImg bool, note hostapi.ShotNote) (*mcp.CallToolResult, error) {
	timing, err := settle(ctx, v, a, "")
	if err != nil {
		return nil, err
	}
	f, err := v.Shot(ctx)
	if err != nil {
		return nil, err
	}
	timing += ", " + f.Timing()
	var body string
	if s, err := v.See(ctx, f, nil); err == nil {
		body = fmt.Sprintf("%s\n%s\n%s", f.Size(), frameLine(v, f), seeingText(s, ""))
	} else if rd, rerr := v.Read(ctx); rerr == nil {
		body = readingText(v, rd, false)
	} else {
		body = fmt.Sprintf("%s\n%s\n(no element list: %v)", f.Size(), frameLine(v, f), err)
	}
	v.CaptureShot(ctx, f, note)
	res.Content = append(res.Content, &mcp.TextContent{Text: timing + "\n" + body})
	if withImg {
		data, mime, _, err := f.Encode(a.Scale)
		if err != nil {
			return nil, err
		}
		withImage(res, data, mime)
	}
	return res, nil
}

// settle waits as afterAction does and answers its timing line.
func settle(ctx context.Context, v *hostapi.VM, a afterArgs, user string) (string, error) {
	start := time.Now()
	limit := time.Duration(a.SettleMs) * time.Millisecond
	if a.WaitWindow != "" {
		w, err := v.WaitWindow(ctx, a.WaitWindow, false, user, limit)
		if err != nil {
			return "", err
		}
		if w.OK {
			return fmt.Sprintf("timing: window %q after %.1f s", a.WaitWindow, w.Elapsed.Seconds()), nil
		}
		return fmt.Sprintf("timing: window %q not shown after %.1f s", a.WaitWindow, w.Elapsed.Seconds()), nil
	}
	s, err := v.WaitStill(ctx, 0, limit)
	if err != nil {
		return "", err
	}
	if !s.OK {
		return fmt.Sprintf("timing: still changing after %.1f s", time.Since(start).Seconds()), nil
	}
	return fmt.Sprintf("timing: settled after %.1f s", s.Elapsed.Seconds()), nil
}
