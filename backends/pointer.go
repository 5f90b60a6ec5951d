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
