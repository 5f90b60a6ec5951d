package poligon

import "github.com/poligon/poligon/hostapi/calls"

// Keyboard is the VM's console keyboard.
type Keyboard struct{ vm *VM }

// Keyboard answers the VM's keyboard verbs.
func (vm *VM) Keyboard() Keyboard { return Keyboard{vm} }

// Type types text character by character (US layout).
func (k Keyboard) Type(text string) error {
	return k.vm.Call(calls.Type, calls.TypeArgs{Text: text}, nil)
}

// Press presses a key or combination by qemu sendkey name: "ret", "tab",
// "esc", "ctrl-alt-f2", "ctrl-c".
func (k Keyboard) Press(key string) error {
	return k.vm.Call(calls.Press, calls.PressArgs{Key: key}, nil)
}

// Mouse is the VM's console mouse; positions are full-size pixels.
type Mouse struct{ vm *VM }

// Mouse answers the VM's mouse verbs.
func (vm *VM) Mouse() Mouse { return Mouse{vm} }

// ClickOpts are the options of Click.
type ClickOpts struct {
	Button string // "left", "middle" or "right"; default "left"
	Count  int    // default 1; 2 is a double click
	// Frame (a shot's digest) refuses the click, clicking nothing, when the
	// screen near x,y has changed since that shot.
	Frame string
}

// Click moves to x,y, presses 300 ms and releases.
func (m Mouse) Click(x, y int, opts ...ClickOpts) error {
	o := firstOf(opts)
	return m.vm.Call(calls.Click, calls.ClickArgs{X: x, Y: y, Button: o.Button, Count: o.Count, Frame: o.Frame}, nil)
}

// ClickLabelOpts are the options of ClickLabel.
type ClickLabelOpts struct {
	Kind   string // button, icon, ...: narrows the vision and grounding models; "icon" skips OCR
	Button string // default "left"
	Count  int    // default 1
	Frame  string // as for Click
}

// ClickLabel clicks the element showing label: OCR first, then the vision
// model's element list of the same screen, then the grounding model.
func (m Mouse) ClickLabel(label string, opts ...ClickLabelOpts) (calls.ClickLabelAnswer, error) {
	o := firstOf(opts)
	var answer calls.ClickLabelAnswer
	err := m.vm.Call(calls.ClickLabel, calls.ClickLabelArgs{Label: label, Kind: o.Kind, Button: o.Button, Count: o.Count, Frame: o.Frame}, &answer)
	return answer, err
}

// DoubleClick double-clicks the left button at x,y.
func (m Mouse) DoubleClick(x, y int) error {
	return m.vm.Call(calls.DoubleClick, calls.PointArgs{X: x, Y: y}, nil)
}

// Drag drags with the left button from x1,y1 to x2,y2.
func (m Mouse) Drag(x1, y1, x2, y2 int) error {
	return m.vm.Call(calls.Drag, calls.DragArgs{X1: x1, Y1: y1, X2: x2, Y2: y2}, nil)
}

// Move moves the pointer to x,y.
func (m Mouse) Move(x, y int) error {
	return m.vm.Call(calls.Move, calls.PointArgs{X: x, Y: y}, nil)
}
