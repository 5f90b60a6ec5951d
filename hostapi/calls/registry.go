package calls

import "encoding/json"

//go:generate go run ./internal/gen

// Registry declares every host call once: its wire name, argument and
// answer types, the options a script may leave out with their defaults,
// and its docs. hostapi answers the calls (one handler each, in
// script_host.go); `go generate ./hostapi/calls` writes everything else a
// script sees from these entries: the verbs of vm in runtime/js/prelude.js,
// the VM interface and answer types of stdlib/poligon.d.ts, and the Go
// SDK's verbs and option structs (stdlib/go/poligon/calls_gen.go). A test
// fails when one of those files drifts from this table.
//
// A new call is its name constant and argument and answer types (calls.go),
// its entry here and its handler in hostapi/script_host.go; then run
// go generate ./hostapi/calls.
//
// Docs are written in the third person without a subject ("runs a
// command"): the Go SDK puts the verb's name in front, poligon.d.ts
// capitalizes them. The verb families keep the meanings the package doc
// gives (expect*, check*, wait*), and a test holds each call to its
// family's result.
var Registry = []Call{
	{
		Name: Exec, Go: "Exec", GoOpts: "ExecOpts",
		Doc:  "runs a shell command as root (umask 022); it does not fail on the exit code, which the answer carries.",
		Args: ExecArgs{}, Answer: ExecAnswer{}, Result: AsAnswer,
		Params:  []Param{{Name: "command"}},
		Options: []Option{{Name: "timeout", Default: 120, Doc: "seconds"}},
	},
	{
		Name: Expect, Go: "Expect", GoOpts: "ExpectOpts", GoByHand: true,
		Doc:  "runs a command and fails unless it exits 0 (and its stdout contains `contains`).",
		Args: ExpectArgs{}, Answer: ExecAnswer{}, Result: AsStdout,
		Params: []Param{{Name: "command"}},
		Options: []Option{
			{Name: "timeout", Default: 120, Doc: "seconds"},
			{Name: "contains", Doc: "stdout must contain it"},
		},
	},
	{
		Name: Check, Go: "Check", GoOpts: "ExecOpts", GoByHand: true,
		Doc:  "runs a command and tells whether it exits 0.",
		Args: ExecArgs{}, Answer: CheckAnswer{}, Result: AsStdoutIfOK,
		Params:  []Param{{Name: "command"}},
		Options: []Option{{Name: "timeout", Default: 120, Doc: "seconds"}},
	},
	{
		Name: RunDetached, Go: "Run", GoOpts: "RunOpts",
		Doc: "starts a long command detached (its state lives in the guest and survives a reboot), or picks up " +
			"the one already running with the same command, and waits up to `wait` seconds. A finished command is " +
			"reported, not repeated, unless restart is true. A script's waits are not capped by max_wait.",
		Args: RunArgs{}, Answer: RunAnswer{}, Result: AsAnswer,
		Params: []Param{{Name: "command"}},
		Options: []Option{
			{Name: "wait", Default: 45, Doc: "seconds to wait for it"},
			{Name: "restart", Doc: "run a finished command again"},
		},
	},
	{
		Name: WaitBoot, Go: "WaitBoot", GoOpts: "WaitBootOpts",
		Doc:  "waits until the guest agent answers.",
		Args: WaitBootArgs{}, Answer: WaitAnswer{}, Result: AsSeconds,
		Options: []Option{{Name: "timeout", Default: 60, Doc: "seconds"}},
	},
	{
		Name: ExecGUI, Go: "ExecGUI", GoOpts: "ExecGUIOpts",
		Doc:  "launches a GUI program in a user's desktop session and tells whether it still runs after 2 s.",
		Args: ExecGUIArgs{}, Answer: ExecGUIAnswer{}, Result: AsAnswer,
		Params:  []Param{{Name: "command"}},
		Options: []Option{{Name: "user", Default: "test"}},
	},
	{
		Name: ReadFile, Go: "ReadFile", GoOpts: "ReadFileOpts", GoByHand: true,
		Doc:  "reads a window of a text file (UTF-8) in the guest; max is in bytes.",
		Args: ReadFileArgs{}, Answer: ReadFileAnswer{}, Result: AsUTF8,
		Params: []Param{{Name: "path"}},
		Options: []Option{
			{Name: "offset", Default: 0},
			{Name: "max", Default: 16384, Doc: "bytes"},
		},
	},
	{
		Name: WriteFile, Go: "WriteFile", GoByHand: true,
		Doc:  "writes a text file in the guest whole.",
		Args: WriteFileArgs{}, Answer: Empty{}, Result: AsNothing,
		Params: []Param{{Name: "path"}, {Name: "text"}},
	},
	{
		Name: Shot, Go: "Screen.Shot",
		Doc:  "takes a screenshot of the console, kept by the host for the run.",
		Args: Empty{}, Answer: ShotAnswer{}, Result: AsAnswer,
	},
	{
		Name: WaitStill, Go: "Screen.WaitStill", GoOpts: "WaitStillOpts",
		Doc:  "waits until the screen has not changed for `seconds`.",
		Args: WaitStillArgs{}, Answer: WaitAnswer{}, Result: AsSeconds,
		Options: []Option{
			{Name: "seconds", Default: 2, Doc: "unchanged for this long"},
			{Name: "timeout", Default: 30, Doc: "seconds"},
		},
	},
	{
		Name: WaitChange, Go: "Screen.WaitChange", GoOpts: "WaitChangeOpts",
		Doc:  "waits until the screen changes.",
		Args: WaitChangeArgs{}, Answer: WaitAnswer{}, Result: AsSeconds,
		Options: []Option{{Name: "timeout", Default: 30, Doc: "seconds"}},
	},
	{
		Name: WaitWindow, Go: "Screen.WaitWindow", GoOpts: "WaitWindowOpts",
		Doc: "waits until a window whose title or class contains `window` is visible (gone: until none is). " +
			"Where it is reads zeros when gone, or when the guest cannot place it (xwininfo missing).",
		Args: WaitWindowArgs{}, Answer: WaitWindowAnswer{}, Result: AsBox,
		Params: []Param{{Name: "window"}},
		Options: []Option{
			{Name: "gone", Doc: "wait until no such window shows"},
			{Name: "timeout", Default: 20, Doc: "seconds"},
			{Name: "user", Default: "test"},
		},
	},
	{
		Name: ReadText, Go: "Screen.Read",
		Doc: "reads the text on screen by OCR: word groups top to bottom, each with its box and words; a " +
			"highlighted row (a list or menu selection) is `selected`. `frame` names the frame read (pass it to " +
			"the mouse verbs).",
		Args: Empty{}, Answer: ReadAnswer{}, Result: AsAnswer,
	},
	{
		Name: WaitText, Go: "Screen.WaitText", GoOpts: "WaitTextOpts",
		Doc: "waits until `label` shows on screen (OCR; matched case-folded and fuzzily, an edit for 4-7 letters, " +
			"two from 8, with Cyrillic and Latin look-alike letters folded); several equally good places fail.",
		Args: TextArgs{}, Answer: TextWaitAnswer{}, Result: AsSpotIfOK,
		Params:  []Param{{Name: "label"}},
		Options: []Option{{Name: "timeout", Default: 30, Doc: "seconds"}},
	},
	{
		Name: CheckText, Go: "Screen.CheckText",
		Doc:  "looks once for `label` on screen, matched as waitText matches it.",
		Args: TextArgs{}, Answer: TextAnswer{}, Result: AsSpotIfFound,
		Params: []Param{{Name: "label"}},
	},
	{
		Name: ExpectText, Go: "Screen.ExpectText",
		Doc:  "looks once for `label` on screen, matched as waitText matches it, and fails when it is not there.",
		Args: TextArgs{}, Answer: TextAnswer{}, Result: AsAnswer,
		Params: []Param{{Name: "label"}},
	},
	{
		Name: Type, Go: "Keyboard.Type",
		Doc:  "types text character by character (US layout; Shift for capitals and shifted symbols).",
		Args: TypeArgs{}, Answer: Empty{}, Result: AsNothing,
		Params: []Param{{Name: "text"}},
	},
	{
		Name: Press, Go: "Keyboard.Press",
		Doc:  `presses a key or combination by qemu sendkey name: "ret", "tab", "esc", "ctrl-alt-f2", "alt-f2", "ctrl-c".`,
		Args: PressArgs{}, Answer: Empty{}, Result: AsNothing,
		Params: []Param{{Name: "key"}},
	},
	{
		Name: Click, Go: "Mouse.Click", GoOpts: "ClickOpts",
		Doc:  "moves to x,y, presses 300 ms and releases; count 2 is a double click.",
		Args: ClickArgs{}, Answer: Empty{}, Result: AsNothing,
		Params: []Param{{Name: "x"}, {Name: "y"}},
		Options: []Option{
			{Name: "button", Default: "left"},
			{Name: "count", Default: 1},
			frameOption,
		},
	},
	{
		Name: DoubleClick, Go: "Mouse.DoubleClick", GoOpts: "FrameOpts",
		Doc:  "double-clicks the left button at x,y.",
		Args: PointArgs{}, Answer: Empty{}, Result: AsNothing,
		Params:  []Param{{Name: "x"}, {Name: "y"}},
		Options: []Option{frameOption},
	},
	{
		Name: Drag, Go: "Mouse.Drag", GoOpts: "FrameOpts",
		Doc:  "drags with the left button from x1,y1 to x2,y2.",
		Args: DragArgs{}, Answer: Empty{}, Result: AsNothing,
		Params:  []Param{{Name: "x1"}, {Name: "y1"}, {Name: "x2"}, {Name: "y2"}},
		Options: []Option{frameOption},
	},
	{
		Name: Move, Go: "Mouse.Move", GoOpts: "FrameOpts",
		Doc:  "moves the pointer to x,y.",
		Args: PointArgs{}, Answer: Empty{}, Result: AsNothing,
		Params:  []Param{{Name: "x"}, {Name: "y"}},
		Options: []Option{frameOption},
	},
	{
		Name: ClickLabel, Go: "Mouse.ClickLabel", GoOpts: "ClickLabelOpts",
		Doc: "clicks the element showing `label`: OCR first, then the vision model's element list of the same " +
			`screen, then the grounding model (kind "icon" skips OCR). Several equally good matches fail, listing them.`,
		Args: ClickLabelArgs{}, Answer: ClickLabelAnswer{}, Result: AsAnswer,
		Params: []Param{{Name: "label"}},
		Options: []Option{
			{Name: "kind", Doc: `narrows the vision and grounding models to an element type (button, icon, ...); "icon" skips OCR`},
			{Name: "button", Default: "left"},
			{Name: "count", Default: 1},
			frameOption,
		},
	},
	// A script's power steps wait as long as its run may last: no client
	// waits on each call, and a step that returned early would race the
	// next one.
	{
		Name: Start, Go: "Power.Start", GoOpts: "PowerOpts",
		Doc:  "starts the VM and waits for the backend's task.",
		Args: PowerArgs{}, Answer: Empty{}, Result: AsNothing,
		Options: []Option{powerWait},
	},
	{
		Name: Stop, Go: "Power.Stop", GoOpts: "PowerOpts",
		Doc:  "powers the VM off (ACPI, then hard).",
		Args: PowerArgs{}, Answer: Empty{}, Result: AsNothing,
		Options: []Option{powerWait},
	},
	{
		Name: Snapshot, Go: "Power.Snapshot", GoOpts: "PowerOpts",
		Doc:  "takes a snapshot named name.",
		Args: SnapshotArgs{}, Answer: Empty{}, Result: AsNothing,
		Params:  []Param{{Name: "name"}},
		Options: []Option{powerWait},
	},
	{
		Name: Rollback, Go: "Power.Rollback", GoOpts: "PowerOpts",
		Doc:  "rolls back to the snapshot named name and starts the VM.",
		Args: SnapshotArgs{}, Answer: Empty{}, Result: AsNothing,
		Params:  []Param{{Name: "name"}},
		Options: []Option{powerWait},
	},
	{
		Name: SaveShot, Go: "SaveShot", GoByHand: true,
		Doc:  "saves a screenshot (shot, or a fresh one) as a PNG under the evidence directory.",
		Args: SaveShotArgs{}, Answer: SaveShotAnswer{}, Result: AsPath,
		Params: []Param{{Name: "path"}, {Name: "shot", Field: "image", JS: ArgShot}},
	},
	{
		Name: Log, Go: "Log",
		Doc:  "writes a line to the run's step log.",
		Args: LogArgs{}, Answer: Empty{}, Result: AsNothing,
		Params: []Param{{Name: "message", JS: ArgText}},
	},
	{
		Name: Recipe, Go: "Recipe",
		Doc:  "runs a recipe on this VM, under the same lock (nesting at most 3 deep), and answers its result.",
		Args: RecipeArgs{}, Answer: json.RawMessage{}, Result: AsAnswer,
		Params: []Param{{Name: "name"}, {Name: "params", JS: ArgStrings}},
	},
	{
		Name: Sleep, Go: "Sleep",
		Doc:  "sleeps, at most 600 seconds. Prefer a wait* verb, which ends as soon as its condition holds.",
		Args: SleepArgs{}, Answer: Empty{}, Result: AsNothing,
		Params: []Param{{Name: "seconds"}},
	},
	{
		Name: Step, Go: "Step",
		Doc:  "marks the start of step n of `of` (1-based): a line in the step log, and the progress a stand's builder records and resumes from.",
		Args: StepArgs{}, Answer: Empty{}, Result: AsNothing,
		Params: []Param{{Name: "n"}, {Name: "of"}, {Name: "label"}},
	},
}

// The options several calls share.
var (
	frameOption = Option{Name: "frame", Doc: "refuses the verb, doing nothing, when the screen near the point has changed since that frame (see Mouse)"}
	powerWait   = Option{Name: "wait", Default: 600, Doc: "seconds"}
)

// Groups documents the verb groups: vm.screen in JavaScript, vm.Screen()
// in Go (where a group has its verbs there).
var Groups = map[string]string{
	"file":     "The guest's files.",
	"screen":   "The VM's console screen.",
	"keyboard": "The VM's console keyboard.",
	"mouse": "The VM's console mouse. Positions are full-size console pixels. `frame` (a shot's digest, or the " +
		"frame a reading or a text spot names) makes a verb fail, doing nothing, when the screen near the point " +
		"has changed since that frame.",
	"power":    "The VM's power and snapshots.",
	"evidence": "What the run keeps beyond its answer.",
}

// A Call is one entry of the Registry.
type Call struct {
	// Name is the call's name on the wire and in transcripts, and the
	// path of its JavaScript verb: "exec", "screen.waitStill".
	Name string
	// Doc says what the verb does, in the third person without a subject.
	Doc string
	// Args and Answer are zero values of the call's argument and answer
	// types (Empty for none).
	Args, Answer any
	// Params are the fields of Args a verb takes as positional arguments,
	// in order.
	Params []Param
	// Options are the fields of Args a script may leave out, in the order
	// of Args' fields, after the Params. A field of Args in neither list
	// is the wire's alone (file.write's base64).
	Options []Option
	// Result is what the JavaScript verb answers the script.
	Result Result
	// Go is the Go SDK's verb: "Exec", or "Screen.Shot" for a verb of a
	// group. GoOpts names its options struct (shared by calls with the
	// same options). GoByHand: the verb is written by hand over VM.Call
	// (its options struct is still generated).
	Go       string
	GoOpts   string
	GoByHand bool
}

// A Param is a positional argument of a verb.
type Param struct {
	Name  string // as the verb calls it; the JSON field too unless Field says otherwise
	Field string // the JSON field of Args it fills, when not Name
	JS    Arg    // how the prelude checks it; "" by its Go type (a string or a number)
}

// An Arg is how the JavaScript prelude checks and sends a positional
// argument that is not a plain string or number.
type Arg string

const (
	ArgText    Arg = "text"    // any value, sent as its string (vm.log)
	ArgStrings Arg = "strings" // an optional object of strings; null is none (vm.recipe's params)
	ArgShot    Arg = "shot"    // an optional screen.shot() answer, sent as its image (vm.evidence.save)
)

// An Option is an argument a script may leave out (or pass as 0 or ""):
// the host then applies Default.
type Option struct {
	Name    string // the JSON field
	Default any    // an int (seconds, bytes, a count) or a string; nil: the zero value means none
	Doc     string // what it is, for the Go SDK's options struct
}

// A Result is what a JavaScript verb answers the script, made from the
// call's answer by the prelude's shaper JS (AsAnswer and AsNothing need
// none). TS is its TypeScript type in poligon.d.ts: "{answer}" stands for
// the answer's type and "{Name}" for the type Name of this package; Doc is
// the sentence poligon.d.ts adds. The Go SDK's generated verbs answer the
// call's answer as it is. A new Result is a shaper in runtime/js/prelude.js
// and an entry of the generator's list (internal/gen).
type Result struct {
	JS, TS, Doc string
}

var (
	AsAnswer      = Result{"answer", "{answer}", ""}
	AsNothing     = Result{"none", "void", ""}
	AsStdout      = Result{"stdout", "string", "Answers stdout."}
	AsStdoutIfOK  = Result{"stdoutIfOK", "string | null", "Answers stdout when it exits 0, else null."}
	AsSeconds     = Result{"seconds", "number | null", "Answers the seconds waited, or null on timeout."}
	AsBox         = Result{"box", "{Box} | null", "Answers where it is, or null on timeout."}
	AsSpotIfOK    = Result{"spotIfOK", "{TextAnswer} | null", "Answers where it is, or null on timeout."}
	AsSpotIfFound = Result{"spotIfFound", "{TextAnswer} | null", "Answers where it is, or null."}
	AsUTF8        = Result{"utf8", "string", "Answers the text read."}
	AsPath        = Result{"path", "string", "Answers the path written, relative to the evidence directory."}
)

// Lookup answers the registry entry of a call name.
func Lookup(name string) (Call, bool) {
	for _, c := range Registry {
		if c.Name == name {
			return c, true
		}
	}
	return Call{}, false
}
