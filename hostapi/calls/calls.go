// Package calls is the host API as data: the name of every call a script can
// make, its arguments and its answer, as JSON, and the Registry that
// declares each call once with its options' defaults and its docs. The host
// (hostapi) decodes these, the JS prelude and the Go SDK for Wasm scripts
// encode them (their verbs are generated from the Registry), and
// transcripts record them. It imports nothing but the standard library, so
// a Wasm guest can use it too.
//
// Verb families keep one meaning (after os-autoinst's testapi):
//   - expect*: succeed or fail the call (the script sees a thrown error);
//   - check*:  answer a value, or null/empty when the condition is not met;
//   - wait*:   block until a condition holds or the timeout ends; on timeout
//     the answer says so (OK false) and nothing is thrown.
//
// Every timeout is in seconds; the Registry gives each option's default.
//
// A field's ts tag gives its TypeScript type in poligon.d.ts where that is
// narrower than its Go type (and makes it required there); a field with
// omitempty is optional there otherwise.
package calls

// Names of the calls: their entries in Registry say what each takes,
// answers and defaults.
const (
	Exec        = "exec"
	Expect      = "expect"
	Check       = "check"
	RunDetached = "run"
	ReadFile    = "file.read"
	WriteFile   = "file.write"
	WaitBoot    = "waitBoot"
	ExecGUI     = "execGui"
	Shot        = "screen.shot"
	WaitStill   = "screen.waitStill"
	WaitChange  = "screen.waitChange"
	WaitWindow  = "screen.waitWindow"
	ReadText    = "screen.read"
	WaitText    = "screen.waitText"
	CheckText   = "screen.checkText"
	ExpectText  = "screen.expectText"
	ClickLabel  = "mouse.clickLabel"
	Type        = "keyboard.type"
	Press       = "keyboard.press"
	Click       = "mouse.click"
	DoubleClick = "mouse.doubleClick"
	Drag        = "mouse.drag"
	Move        = "mouse.move"
	Start       = "power.start"
	Stop        = "power.stop"
	Snapshot    = "power.snapshot"
	Rollback    = "power.rollback"
	SaveShot    = "evidence.save"
	Log         = "log"
	Recipe      = "recipe"
	Sleep       = "sleep"
	Step        = "step"
)

// Empty is the answer of calls that answer nothing but success, and the
// arguments of calls that take none.
type Empty struct{}

// ExecArgs runs a shell command as root in the guest (umask 022).
type ExecArgs struct {
	Command string  `json:"command"`
	Timeout float64 `json:"timeout,omitempty"`
}

// ExecAnswer is a finished command.
type ExecAnswer struct {
	Exit   int    `json:"exit"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

// ExpectArgs is ExecArgs plus a substring stdout must contain.
type ExpectArgs struct {
	Command  string  `json:"command"`
	Timeout  float64 `json:"timeout,omitempty"`
	Contains string  `json:"contains,omitempty"`
}

// CheckAnswer is an exec whose non-zero exit is a "no", not a failure.
type CheckAnswer struct {
	OK bool `json:"ok"`
	ExecAnswer
}

// RunArgs starts (or picks up) a long detached command; Restart runs a
// finished command again.
type RunArgs struct {
	Command string  `json:"command"`
	Wait    float64 `json:"wait,omitempty"`
	Restart bool    `json:"restart,omitempty"`
}

// RunAnswer is where a detached command is, with the last lines of its
// output.
type RunAnswer struct {
	State   string  `json:"state" ts:"\"done\" | \"failed\" | \"running\""`
	Exit    int     `json:"exit"`
	Seconds float64 `json:"seconds"`
	Tail    string  `json:"tail"` // the last 20 lines of its output
}

// ReadFileArgs reads a window of a guest file.
type ReadFileArgs struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Max    int64  `json:"max,omitempty"`
}

// ReadFileAnswer carries the bytes as base64 and the whole file's size.
type ReadFileAnswer struct {
	Base64 string `json:"base64"`
	Size   int64  `json:"size"`
}

// WriteFileArgs writes a guest file whole: Text, or Base64 for bytes.
type WriteFileArgs struct {
	Path   string `json:"path"`
	Text   string `json:"text,omitempty"`
	Base64 string `json:"base64,omitempty"`
}

// WaitBootArgs waits for the guest agent.
type WaitBootArgs struct {
	Timeout float64 `json:"timeout,omitempty"`
}

// WaitAnswer is the answer of every wait*: OK false on timeout.
type WaitAnswer struct {
	OK      bool    `json:"ok"`
	Seconds float64 `json:"seconds"`
}

// ExecGUIArgs launches a program in a user's desktop session.
type ExecGUIArgs struct {
	Command string `json:"command"`
	User    string `json:"user,omitempty"`
}

// ExecGUIAnswer says whether the program still runs after 2 s, and its
// first output.
type ExecGUIAnswer struct {
	Running bool   `json:"running"`
	Output  string `json:"output"`
}

// ShotAnswer names a screenshot kept by the host for the run; Image is the
// handle evidence.save and the run's answer refer to.
type ShotAnswer struct {
	Image  string `json:"image"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Digest string `json:"digest"` // a digest of the pixels (xxHash64): equal screens have equal digests
}

// WaitStillArgs waits until the screen has not changed for Seconds or
// Timeout passes.
type WaitStillArgs struct {
	Seconds float64 `json:"seconds,omitempty"`
	Timeout float64 `json:"timeout,omitempty"`
}

// WaitChangeArgs waits until the screen changes.
type WaitChangeArgs struct {
	Timeout float64 `json:"timeout,omitempty"`
}

// WaitWindowArgs waits until a window whose title or class contains Window
// shows (Gone: until none does).
type WaitWindowArgs struct {
	Window  string  `json:"window"`
	Gone    bool    `json:"gone,omitempty"`
	Timeout float64 `json:"timeout,omitempty"`
	User    string  `json:"user,omitempty"`
}

// WaitWindowAnswer is WaitAnswer plus where the window is.
type WaitWindowAnswer struct {
	WaitAnswer
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// TypeArgs types text on the console keyboard.
type TypeArgs struct {
	Text string `json:"text"`
}

// PressArgs presses a key or combination by qemu sendkey name.
type PressArgs struct {
	Key string `json:"key"`
}

// PointArgs is a console position in full-size pixels; Frame guards it
// as for Click (where the call acts).
type PointArgs struct {
	X     int    `json:"x"`
	Y     int    `json:"y"`
	Frame string `json:"frame,omitempty"`
}

// ClickArgs clicks at a point. Frame (a screen.shot digest) refuses the
// click, clicking nothing, when the screen around the point has changed
// since that shot.
type ClickArgs struct {
	X      int    `json:"x"`
	Y      int    `json:"y"`
	Button string `json:"button,omitempty" ts:"\"left\" | \"middle\" | \"right\""`
	Count  int    `json:"count,omitempty"`
	Frame  string `json:"frame,omitempty"`
}

// DragArgs drags with the left button; Frame guards both ends as for Click.
type DragArgs struct {
	X1    int    `json:"x1"`
	Y1    int    `json:"y1"`
	X2    int    `json:"x2"`
	Y2    int    `json:"y2"`
	Frame string `json:"frame,omitempty"`
}

// Box is a rectangle on screen in full-size console pixels: the top-left
// corner and the size.
type Box struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// TextWord is one word OCR read.
type TextWord struct {
	Text string  `json:"text"`
	Box  Box     `json:"box"`
	Conf float64 `json:"conf"` // Tesseract's confidence, 0-100
}

// TextLine is a word group: words close together on one baseline.
type TextLine struct {
	Text     string     `json:"text"`
	Box      Box        `json:"box"`
	Selected bool       `json:"selected,omitempty"` // a highlighted row (a list or menu selection)
	Conf     float64    `json:"conf"`               // Tesseract's mean word confidence, 0-100
	Words    []TextWord `json:"words"`
}

// ReadAnswer is the text of one frame, top to bottom.
type ReadAnswer struct {
	Frame  string     `json:"frame"` // the frame's digest
	Width  int        `json:"width"`
	Height int        `json:"height"`
	Lines  []TextLine `json:"lines"`
}

// TextArgs names text to look for on screen: matched case-folded, fuzzily
// (an edit for 4-7 letters, two from 8), with Cyrillic and Latin look-alike
// letters folded. Timeout serves waitText only.
type TextArgs struct {
	Label   string  `json:"label"`
	Timeout float64 `json:"timeout,omitempty"`
}

// TextAnswer is where the text is: X, Y its centre (where a click lands),
// Box its extent, Text what was read there. Found false: not on screen
// (the JavaScript verbs answer null then, so their TextSpot is always
// found).
type TextAnswer struct {
	Found    bool   `json:"found" ts:"true"`
	Text     string `json:"text,omitempty" ts:"string"`
	X        int    `json:"x"`
	Y        int    `json:"y"`
	Box      Box    `json:"box"`
	Selected bool   `json:"selected,omitempty"`
	Frame    string `json:"frame"` // the frame it was read on
}

// TextWaitAnswer is WaitAnswer plus where the text showed.
type TextWaitAnswer struct {
	WaitAnswer
	Text TextAnswer `json:"text"`
}

// ClickLabelArgs clicks an element by its visible label. Kind narrows the
// element type (button, icon, ...; see hostapi.Kinds); Frame as for Click.
type ClickLabelArgs struct {
	Label  string `json:"label"`
	Kind   string `json:"kind,omitempty" ts:"ElementKind"`
	Button string `json:"button,omitempty" ts:"\"left\" | \"middle\" | \"right\""`
	Count  int    `json:"count,omitempty"`
	Frame  string `json:"frame,omitempty"`
}

// ClickLabelAnswer says where the click landed and how the label was
// found: source "ocr", "elements" (the vision model's list) or
// "grounding".
type ClickLabelAnswer struct {
	Source string `json:"source" ts:"\"ocr\" | \"elements\" | \"grounding\""`
	X      int    `json:"x"`
	Y      int    `json:"y"`
	Text   string `json:"text"` // what was read at that spot
	Frame  string `json:"frame"`
}

// PowerArgs bounds how long start/stop wait for the backend's task.
type PowerArgs struct {
	Wait float64 `json:"wait,omitempty"`
}

// SnapshotArgs names a snapshot.
type SnapshotArgs struct {
	Name string  `json:"name"`
	Wait float64 `json:"wait,omitempty"`
}

// SaveShotArgs saves a screenshot (Image from screen.shot; default: a fresh
// one) as a PNG under the evidence directory.
type SaveShotArgs struct {
	Path  string `json:"path"`
	Image string `json:"image,omitempty"`
}

// SaveShotAnswer is where it was written, relative to the evidence dir.
type SaveShotAnswer struct {
	Path string `json:"path"`
}

// LogArgs writes a line to the run's step log.
type LogArgs struct {
	Message string `json:"message"`
}

// RecipeArgs runs a recipe (a script with tool: false, or another tool
// script) on the same VM, under the same lock; nesting is at most 3 deep.
// It answers the recipe's own answer.
type RecipeArgs struct {
	Name   string            `json:"name"`
	Params map[string]string `json:"params,omitempty"`
}

// SleepArgs sleeps; at most 600 seconds.
type SleepArgs struct {
	Seconds float64 `json:"seconds"`
}

// StepArgs marks the start of step N of Of, named Label: progress a stand's
// builder records (and resumes from), and a line in the run's log.
type StepArgs struct {
	N     int    `json:"n"`
	Of    int    `json:"of"`
	Label string `json:"label"`
}

// ReadsText reports whether a call's answer is what OCR read on the screen
// (a trace step keeps it as the step's text).
func ReadsText(call string) bool {
	switch call {
	case ReadText, WaitText, CheckText, ExpectText:
		return true
	}
	return false
}
