// The poligon script API. A script is a CommonJS module:
//
//   /// <reference path="poligon.d.ts" />
//   /** @type {poligon.Script} */
//   module.exports = { name: "hello", description: "...", params: {}, tool: true,
//                      run(vm, params) { return vm.expect("uname -a"); } };
//
// The API is synchronous: each call blocks until the host answers or its
// timeout ends. Verb families keep one meaning:
//   expect*  succeed or throw (a PoligonError with .hint);
//   check*   answer a value, or null when the condition does not hold;
//   wait*    block until a condition holds or the timeout ends; on timeout
//            they answer null and throw nothing.
// Timeouts are in seconds; every default is written next to its option.
//
// A script sees no wall clock, no randomness, no filesystem and no network
// except through this API: Date is fixed per run (new Date() and Date.now()
// answer the run's clock and do not advance), Math.random is seeded.
// require() takes only "poligon/<module>" stdlib modules and other scripts
// ("./name" or "name" from the scripts and recipes directories); Node.js
// modules ("fs", "child_process", ...) and paths are refused. There is no
// process, no setTimeout; console.log/info/debug/warn/error write to the
// run's log. Each run gets a fresh runtime: nothing a script does to the
// builtins survives it.
//
// Limits: a run ends at its time limit (the script's timeout, default 600 s),
// at its memory ceiling (256 MB unless the server sets another) and when its caller cancels; the script cannot catch
// that. One builtin call may not build a value past the ceiling: a string
// over 16M characters ("x".repeat, padStart, padEnd), an array over 4M
// elements (new Array(n), Array.from, fill, join, map on such), a typed array
// or ArrayBuffer over the ceiling throws a RangeError. Recursion deeper than
// 4096 calls ends the run.
//
// run may be async (it is awaited), but nothing is ever asynchronous: every
// call blocks, and there are no timers.

declare namespace poligon {
  /** A script module: the tool vm_<name>, or a recipe when tool is false. */
  interface Script {
    /** ^[a-z][a-z0-9_]*$ */
    name: string;
    description: string;
    /** The tool's title (one line), which MCP clients show. Defaults: the name in words, e.g. "Gnome login (script)". */
    title?: string;
    /** Every param is a string; one without a default is required. */
    params?: { [name: string]: { description?: string; default?: string } };
    /** false: a recipe, callable from scripts and stand plans only. Defaults: tool true. */
    tool?: boolean;
    /** Time limit of one run, in seconds. Defaults: timeout 600. */
    timeout?: number;
    /** The result becomes the tool's answer: a string as text, a Shot as an image, anything else as JSON. */
    run(vm: VM, params: { [name: string]: string }): unknown;
  }

  // The answer types a script sees, from hostapi/calls.
  // BEGIN GENERATED types: go generate ./hostapi/calls writes this part from hostapi/calls/registry.go; do not edit.
  /** A finished command. */
  interface ExecResult {
    exit: number;
    stdout: string;
    stderr: string;
  }

  /** Where a detached command is. */
  interface RunState {
    state: "done" | "failed" | "running";
    exit: number;
    seconds: number;
    /** The last 20 lines of its output. */
    tail: string;
  }

  /** Whether a GUI program still runs 2 s after its launch, and its first output. */
  interface GuiLaunch {
    running: boolean;
    output: string;
  }

  /** A screenshot kept for this run. */
  interface Shot {
    image: string;
    width: number;
    height: number;
    /** A digest of the pixels (xxHash64): equal screens have equal digests. */
    digest: string;
  }

  /** A rectangle on screen in full-size console pixels: the top-left corner and the size. */
  interface Box {
    x: number;
    y: number;
    w: number;
    h: number;
  }

  /** What screen.read answers: the text of one frame, top to bottom. */
  interface Reading {
    /** The frame's digest. */
    frame: string;
    width: number;
    height: number;
    lines: TextLine[];
  }

  /** A word group: words close together on one baseline. */
  interface TextLine {
    text: string;
    box: Box;
    /** A highlighted row (a list or menu selection). */
    selected?: boolean;
    /** Tesseract's mean word confidence, 0-100. */
    conf: number;
    words: TextWord[];
  }

  /** One word OCR read. */
  interface TextWord {
    text: string;
    box: Box;
    /** Tesseract's confidence, 0-100. */
    conf: number;
  }

  /** Where text is: x, y its centre (where a click lands), box its extent, text what was read there. */
  interface TextSpot {
    found: true;
    text: string;
    x: number;
    y: number;
    box: Box;
    selected?: boolean;
    /** The frame it was read on. */
    frame: string;
  }

  /** Where mouse.clickLabel clicked, and how it found the label. */
  interface LabelClick {
    source: "ocr" | "elements" | "grounding";
    x: number;
    y: number;
    /** What was read at that spot. */
    text: string;
    frame: string;
  }
  // END GENERATED types

  type ElementKind = "button" | "link" | "field" | "checkbox" | "radio" | "tab" | "menu" | "menuitem" | "list item" | "icon" | "text" | "window" | "other";

  /**
   * The VM the script runs against; every call checks it is the caller's. The object is frozen.
   * Every verb checks its arguments: a wrong type or an unknown option key throws a TypeError before anything is
   * sent. Each verb's "Defaults:" line gives the value of every option it leaves out (the host's own table,
   * hostapi/calls/registry.go). A verb that fails throws a PoligonError.
   */
  interface VM {
    readonly vmid: number;

    // BEGIN GENERATED verbs: go generate ./hostapi/calls writes this part from hostapi/calls/registry.go; do not edit.
    /**
     * Runs a shell command as root (umask 022); it does not fail on the exit code, which the answer carries.
     * Defaults: timeout 120.
     */
    exec(command: string, opts?: { timeout?: number }): ExecResult;
    /**
     * Runs a command and fails unless it exits 0 (and its stdout contains `contains`). Answers stdout.
     * Defaults: timeout 120.
     */
    expect(command: string, opts?: { timeout?: number; contains?: string }): string;
    /**
     * Runs a command and tells whether it exits 0. Answers stdout when it exits 0, else null.
     * Defaults: timeout 120.
     */
    check(command: string, opts?: { timeout?: number }): string | null;
    /**
     * Starts a long command detached (its state lives in the guest and survives a reboot), or picks up the one
     * already running with the same command, and waits up to `wait` seconds. A finished command is reported, not
     * repeated, unless restart is true. A script's waits are not capped by max_wait.
     * Defaults: wait 45.
     */
    run(command: string, opts?: { wait?: number; restart?: boolean }): RunState;
    /** Waits until the guest agent answers. Answers the seconds waited, or null on timeout. Defaults: timeout 60. */
    waitBoot(opts?: { timeout?: number }): number | null;
    /**
     * Launches a GUI program in a user's desktop session and tells whether it still runs after 2 s.
     * Defaults: user "test".
     */
    execGui(command: string, opts?: { user?: string }): GuiLaunch;

    /** The guest's files. */
    file: {
      /**
       * Reads a window of a text file (UTF-8) in the guest; max is in bytes. Answers the text read.
       * Defaults: offset 0, max 16384.
       */
      read(path: string, opts?: { offset?: number; max?: number }): string;
      /** Writes a text file in the guest whole. */
      write(path: string, text: string): void;
    };

    /** The VM's console screen. */
    screen: {
      /** Takes a screenshot of the console, kept by the host for the run. */
      shot(): Shot;
      /**
       * Waits until the screen has not changed for `seconds`. Answers the seconds waited, or null on timeout.
       * Defaults: seconds 2, timeout 30.
       */
      waitStill(opts?: { seconds?: number; timeout?: number }): number | null;
      /** Waits until the screen changes. Answers the seconds waited, or null on timeout. Defaults: timeout 30. */
      waitChange(opts?: { timeout?: number }): number | null;
      /**
       * Waits until a window whose title or class contains `window` is visible (gone: until none is). Where it is
       * reads zeros when gone, or when the guest cannot place it (xwininfo missing). Answers where it is, or null on
       * timeout.
       * Defaults: timeout 20, user "test".
       */
      waitWindow(window: string, opts?: { gone?: boolean; timeout?: number; user?: string }): Box | null;
      /**
       * Reads the text on screen by OCR: word groups top to bottom, each with its box and words; a highlighted row (a
       * list or menu selection) is `selected`. `frame` names the frame read (pass it to the mouse verbs).
       */
      read(): Reading;
      /**
       * Waits until `label` shows on screen (OCR; matched case-folded and fuzzily, an edit for 4-7 letters, two from
       * 8, with Cyrillic and Latin look-alike letters folded); several equally good places fail. Answers where it is,
       * or null on timeout.
       * Defaults: timeout 30.
       */
      waitText(label: string, opts?: { timeout?: number }): TextSpot | null;
      /** Looks once for `label` on screen, matched as waitText matches it. Answers where it is, or null. */
      checkText(label: string): TextSpot | null;
      /** Looks once for `label` on screen, matched as waitText matches it, and fails when it is not there. */
      expectText(label: string): TextSpot;
    };

    /** The VM's console keyboard. */
    keyboard: {
      /** Types text character by character (US layout; Shift for capitals and shifted symbols). */
      type(text: string): void;
      /**
       * Presses a key or combination by qemu sendkey name: "ret", "tab", "esc", "ctrl-alt-f2", "alt-f2", "ctrl-c".
       */
      press(key: string): void;
    };

    /**
     * The VM's console mouse. Positions are full-size console pixels. `frame` (a shot's digest, or the frame a
     * reading or a text spot names) makes a verb fail, doing nothing, when the screen near the point has changed
     * since that frame.
     */
    mouse: {
      /** Moves to x,y, presses 300 ms and releases; count 2 is a double click. Defaults: button "left", count 1. */
      click(x: number, y: number, opts?: { button?: "left" | "middle" | "right"; count?: number; frame?: string }): void;
      /** Double-clicks the left button at x,y. */
      doubleClick(x: number, y: number, opts?: { frame?: string }): void;
      /** Drags with the left button from x1,y1 to x2,y2. */
      drag(x1: number, y1: number, x2: number, y2: number, opts?: { frame?: string }): void;
      /** Moves the pointer to x,y. */
      move(x: number, y: number, opts?: { frame?: string }): void;
      /**
       * Clicks the element showing `label`: OCR first, then the vision model's element list of the same screen, then
       * the grounding model (kind "icon" skips OCR). Several equally good matches fail, listing them.
       * Defaults: button "left", count 1.
       */
      clickLabel(label: string, opts?: { kind?: ElementKind; button?: "left" | "middle" | "right"; count?: number; frame?: string }): LabelClick;
    };

    /** The VM's power and snapshots. */
    power: {
      /** Starts the VM and waits for the backend's task. Defaults: wait 600. */
      start(opts?: { wait?: number }): void;
      /** Powers the VM off (ACPI, then hard). Defaults: wait 600. */
      stop(opts?: { wait?: number }): void;
      /** Takes a snapshot named name. Defaults: wait 600. */
      snapshot(name: string, opts?: { wait?: number }): void;
      /** Rolls back to the snapshot named name and starts the VM. Defaults: wait 600. */
      rollback(name: string, opts?: { wait?: number }): void;
    };

    /** What the run keeps beyond its answer. */
    evidence: {
      /**
       * Saves a screenshot (shot, or a fresh one) as a PNG under the evidence directory. Answers the path written,
       * relative to the evidence directory.
       */
      save(path: string, shot?: Shot): string;
    };

    /** Writes a line to the run's step log. */
    log(message: string): void;
    /** Runs a recipe on this VM, under the same lock (nesting at most 3 deep), and answers its result. */
    recipe(name: string, params?: { [name: string]: string }): unknown;
    /** Sleeps, at most 600 seconds. Prefer a wait* verb, which ends as soon as its condition holds. */
    sleep(seconds: number): void;
    /**
     * Marks the start of step n of `of` (1-based): a line in the step log, and the progress a stand's builder records
     * and resumes from.
     */
    step(n: number, of: number, label: string): void;
    // END GENERATED verbs
  }

  /** What a failed host call throws. An uncaught one ends the run with its message and hint. */
  interface PoligonError extends Error {
    name: "PoligonError";
    /** The host call that failed: "exec", "screen.shot", ... */
    call: string;
    hint?: string;
  }
}

/** The class of the errors host calls throw: `catch (e) { if (e instanceof PoligonError) ... }`. */
declare const PoligonError: { new (call: string, message: string, hint?: string): poligon.PoligonError };

/** Writes to the run's log (never to the server's stdout). warn and error lines are prefixed "warning: " and "error: ". */
declare const console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  debug(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
};

/** CommonJS: stdlib modules ("poligon/text") and other scripts or recipes by name ("./name" or "name"). */
declare function require(name: "poligon/text"): typeof import("poligon/text");
declare function require(name: string): any;
declare const module: { exports: poligon.Script | { [key: string]: unknown } };
declare const exports: { [key: string]: unknown };

/** Helpers for the text commands answer. */
declare module "poligon/text" {
  /** The lines of text, without the final empty line a trailing newline leaves. CRLF counts as one break. */
  export function lines(text: string): string[];
  /** The whitespace-separated fields of one line. */
  export function fields(line: string): string[];
  /** The lines of text that contain pattern (a string) or match it (a RegExp). */
  export function grep(text: string, pattern: string | RegExp): string[];
  /** KEY=value lines (os-release, env files, systemctl show) as an object; # comments skipped, one pair of quotes removed. */
  export function keyValues(text: string): { [key: string]: string };
}
