package dataset

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Dump is a shot's .atspi.json: what the guest's accessibility tree said
// was on the screen when the frame was taken. The guest's dump script
// prints it; Writer keeps the showing widgets and scales them onto the
// frame when the guest's screen differs from it.
type Dump struct {
	Screen      [2]int   `json:"screen"`       // the guest's screen size, in the dump's coordinates (X11: required to place it)
	Locale      string   `json:"locale"`       // the session's LANG, as the guest has it
	Desktop     string   `json:"desktop"`      // XDG_CURRENT_DESKTOP
	SessionType string   `json:"session_type"` // x11 or wayland
	Focused     *Widget  `json:"focused"`      // the widget with the keyboard focus, if any showed
	Truncated   bool     `json:"truncated"`    // a walk limit (widgets, nodes, deadline) cut it short
	Error       string   `json:"error,omitempty"`
	Widgets     []Widget `json:"widgets"`
}

// Widget is one showing widget: its role and name as AT-SPI tells them,
// its box, its states.
type Widget struct {
	App    string   `json:"app"`
	Role   string   `json:"role"`
	Name   string   `json:"name"`
	X      int      `json:"x"`
	Y      int      `json:"y"`
	W      int      `json:"w"`
	H      int      `json:"h"`
	States []string `json:"states"`
	Depth  int      `json:"depth"`
}

// hardRoles are the AT-SPI roles of the screens the vision model finds
// hardest (dense panels of rows, cells and small buttons): trees,
// toolbars, lists and tables. "panel" itself is left out: GTK and Qt give
// every plain container that role, so it would mark every window.
var hardRoles = []string{"tree", "tree table", "table", "list", "list box", "tool bar"}

// Hard says whether the dump shows a tree, toolbar, list or table.
func (d *Dump) Hard() bool {
	for _, w := range d.Widgets {
		if slices.Contains(hardRoles, w.Role) {
			return true
		}
	}
	return false
}

// Logical says whether the dump's boxes are in logical coordinates
// (Wayland), not the framebuffer's pixels.
func (d *Dump) Logical() bool { return d.SessionType == "wayland" }

// ParseDump reads a .atspi.json.
func ParseDump(b []byte) (*Dump, error) {
	var d Dump
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("not an AT-SPI dump: %w", err)
	}
	return &d, nil
}

// keepShowing drops the widgets that are not on the screen: AT-SPI VISIBLE
// without SHOWING is a child of a hidden tab or a closed menu, and a box of
// no size is a widget not realised yet.
func (d *Dump) keepShowing() {
	showing := func(w Widget) bool { return w.W > 0 && w.H > 0 && slices.Contains(w.States, "showing") }
	d.Widgets = slices.DeleteFunc(d.Widgets, func(w Widget) bool { return !showing(w) })
	if d.Focused != nil && !showing(*d.Focused) {
		d.Focused = nil
	}
}

// scaled answers a copy of the dump with every box scaled from the from
// screen onto the to one.
func (d *Dump) scaled(from, to [2]int) *Dump {
	sx := float64(to[0]) / float64(from[0])
	sy := float64(to[1]) / float64(from[1])
	box := func(w Widget) Widget {
		x0, y0 := int(math.Round(float64(w.X)*sx)), int(math.Round(float64(w.Y)*sy))
		x1, y1 := int(math.Round(float64(w.X+w.W)*sx)), int(math.Round(float64(w.Y+w.H)*sy))
		w.X, w.Y, w.W, w.H = x0, y0, max(x1-x0, 1), max(y1-y0, 1)
		return w
	}
	out := *d
	out.Screen = to
	out.Widgets = make([]Widget, len(d.Widgets))
	for i, w := range d.Widgets {
		out.Widgets[i] = box(w)
	}
	if d.Focused != nil {
		f := box(*d.Focused)
		out.Focused = &f
	}
	return &out
}

// logicalScreen sizes a Wayland dump's logical screen from the shell's root
// widget: the largest showing box at the origin among the shallowest
// widgets. ok is false when there is none, or its shape is not the frame's
// (within 2 %), so the dump cannot be placed on the frame.
func (d *Dump) logicalScreen(frameW, frameH int) ([2]int, bool) {
	var root *Widget
	for i := range d.Widgets {
		w := &d.Widgets[i]
		if w.X != 0 || w.Y != 0 {
			continue
		}
		if root == nil || w.Depth < root.Depth || w.Depth == root.Depth && w.W*w.H > root.W*root.H {
			root = w
		}
	}
	if root == nil || frameW <= 0 || frameH <= 0 {
		return [2]int{}, false
	}
	aspect := float64(root.W) / float64(root.H)
	want := float64(frameW) / float64(frameH)
	if math.Abs(aspect-want) > 0.02*want {
		return [2]int{}, false
	}
	return [2]int{root.W, root.H}, true
}
