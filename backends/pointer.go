package backends

import "time"

// Pointer timing, one meaning of a click on every console (RFB, a PiKVM).
// A single click holds 300 ms (some guests miss shorter presses under
// load); the presses of a multi-click hold 50 ms with 50 ms between them,
// so they all fall well inside a desktop's double-click interval (GTK
// 400 ms, Windows 500 ms).
const (
	ClickHold      = 300 * time.Millisecond
	MultiClickHold = 50 * time.Millisecond
	MultiClickGap  = 50 * time.Millisecond
	PointerSettle  = 30 * time.Millisecond // after a move, before a press
	DragHold       = 150 * time.Millisecond
	DragStepPause  = 20 * time.Millisecond
	WheelPause     = 30 * time.Millisecond
)

// StepFrom is where a console puts the pointer first on its way to x, y on
// a w x h screen: one pixel diagonally off (inward at the right and bottom
// edges). A guest's kernel drops an absolute axis whose value did not
// change, so after the guest moved the pointer (xdotool, a program warping
// it) a move to the last move's height would send x alone; from the step
// both axes change. Consoles move there, wait PointerSettle, then move to
// x, y.
func StepFrom(x, y, w, h int) (sx, sy int) {
	sx, sy = x+1, y+1
	if sx >= w {
		sx = max(x-1, 0)
	}
	if sy >= h {
		sy = max(y-1, 0)
	}
	return sx, sy
}
