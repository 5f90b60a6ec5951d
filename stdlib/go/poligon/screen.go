package poligon

import "github.com/poligon/poligon/hostapi/calls"

// Screen is the VM's console screen.
type Screen struct{ vm *VM }

// Screen answers the VM's screen verbs.
func (vm *VM) Screen() Screen { return Screen{vm} }

// WaitStillOpts are the options of WaitStill.
type WaitStillOpts struct {
	Seconds float64 // unchanged for this long; default 2
	Timeout float64 // default 30
}

// WaitChangeOpts are the options of WaitChange.
type WaitChangeOpts struct {
	Timeout float64 // default 30
}

// WaitWindowOpts are the options of WaitWindow.
type WaitWindowOpts struct {
	Gone    bool    // wait until no such window shows
	Timeout float64 // default 20
	User    string  // default "test"
}

// Shot takes a screenshot of the console, kept by the host for the run.
func (s Screen) Shot() (calls.ShotAnswer, error) {
	var answer calls.ShotAnswer
	err := s.vm.Call(calls.Shot, calls.Empty{}, &answer)
	return answer, err
}

// WaitStill waits until the screen has not changed for opts.Seconds; OK is
// false on timeout.
func (s Screen) WaitStill(opts ...WaitStillOpts) (calls.WaitAnswer, error) {
	o := firstOf(opts)
	var answer calls.WaitAnswer
	err := s.vm.Call(calls.WaitStill, calls.WaitStillArgs{Seconds: o.Seconds, Timeout: o.Timeout}, &answer)
	return answer, err
}

// WaitChange waits until the screen changes; OK is false on timeout.
func (s Screen) WaitChange(opts ...WaitChangeOpts) (calls.WaitAnswer, error) {
	var answer calls.WaitAnswer
	err := s.vm.Call(calls.WaitChange, calls.WaitChangeArgs{Timeout: firstOf(opts).Timeout}, &answer)
	return answer, err
}

// WaitWindow waits until a window whose title or class contains window
// shows (opts.Gone: until none does) and answers where it is; OK is false
// on timeout.
func (s Screen) WaitWindow(window string, opts ...WaitWindowOpts) (calls.WaitWindowAnswer, error) {
	o := firstOf(opts)
	var answer calls.WaitWindowAnswer
	err := s.vm.Call(calls.WaitWindow, calls.WaitWindowArgs{Window: window, Gone: o.Gone, Timeout: o.Timeout, User: o.User}, &answer)
	return answer, err
}

// WaitTextOpts are the options of WaitText.
type WaitTextOpts struct {
	Timeout float64 // default 30
}

// Read reads the text on screen by OCR: word groups top to bottom, with
// their boxes and words; a highlighted row is Selected.
func (s Screen) Read() (calls.ReadAnswer, error) {
	var answer calls.ReadAnswer
	err := s.vm.Call(calls.ReadText, calls.Empty{}, &answer)
	return answer, err
}

// WaitText waits until label shows on screen (matched case-folded and
// fuzzily, Cyrillic and Latin look-alikes folded) and answers where; OK is
// false on timeout. Several equally good places are an error.
func (s Screen) WaitText(label string, opts ...WaitTextOpts) (calls.TextWaitAnswer, error) {
	var answer calls.TextWaitAnswer
	err := s.vm.Call(calls.WaitText, calls.TextArgs{Label: label, Timeout: firstOf(opts).Timeout}, &answer)
	return answer, err
}

// CheckText looks once: where label is, Found false when it is not there.
func (s Screen) CheckText(label string) (calls.TextAnswer, error) {
	var answer calls.TextAnswer
	err := s.vm.Call(calls.CheckText, calls.TextArgs{Label: label}, &answer)
	return answer, err
}

// ExpectText looks once: where label is, an error when it is not there.
func (s Screen) ExpectText(label string) (calls.TextAnswer, error) {
	var answer calls.TextAnswer
	err := s.vm.Call(calls.ExpectText, calls.TextArgs{Label: label}, &answer)
	return answer, err
}

// SaveShot saves a screenshot (shot, or a fresh one) as a PNG under the
// evidence directory and answers the path written, relative to it.
func (vm *VM) SaveShot(path string, shot ...calls.ShotAnswer) (string, error) {
	var answer calls.SaveShotAnswer
	err := vm.Call(calls.SaveShot, calls.SaveShotArgs{Path: path, Image: firstOf(shot).Image}, &answer)
	return answer.Path, err
}
