// The script API (stdlib/poligon.d.ts) over one native function.
//
// This file is evaluated once per run, before the script, and answers an
// object the Go side keeps. It captures every builtin it uses up front, so a
// script that replaces JSON.stringify or Array.prototype.indexOf cannot change
// what the host is asked; the objects it hands out are frozen.
//
// The verbs of vm are written by go generate from hostapi/calls.Registry
// (between the GENERATED markers); the checks and shapers they use are here.
//
// hostCall(name, argsJSON) answers the answer's JSON text or throws a
// PoligonError built on the Go side; consoleWrite(level, text) writes to the
// run's log; decodeUTF8Base64(s) decodes file.read answers.
(function (hostCall, consoleWrite, decodeUTF8Base64) {
  "use strict";
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const freeze = Object.freeze;
  const keys = Object.keys;
  const create = Object.create;
  const setPrototypeOf = Object.setPrototypeOf;
  const isArray = Array.isArray;
  const String_ = String;
  const Error_ = Error;
  const TypeError_ = TypeError;

  class PoligonError extends Error_ {
    constructor(call, message, hint) {
      super(message);
      this.call = call;
      if (hint) this.hint = hint;
    }
  }
  PoligonError.prototype.name = "PoligonError";
  freeze(PoligonError.prototype);
  freeze(PoligonError);

  // call asks the host. The arguments have no prototype, so a toJSON the
  // script put on Object.prototype does not rewrite them.
  function call(name, args) {
    const answer = hostCall(name, stringify(setPrototypeOf(args, null)));
    return parse(answer);
  }

  function oneOf(list, key) {
    for (let i = 0; i < list.length; i++) if (list[i] === key) return true;
    return false;
  }

  // options checks an options object against the keys a verb knows, so a
  // typo (vm.exec(cmd, {timout: 5})) is an error and not a silent default,
  // and copies its own keys only (Object.prototype.timeout is not an option).
  function options(verb, opts, allowed) {
    const out = create(null);
    if (opts === undefined || opts === null) return out;
    if (typeof opts !== "object" || isArray(opts)) {
      throw new TypeError_(`vm.${verb}: options must be an object, not ${typeof opts}`);
    }
    const ks = keys(opts);
    for (let i = 0; i < ks.length; i++) {
      if (!oneOf(allowed, ks[i])) {
        const known = allowed.length ? allowed.join(", ") : "none";
        throw new TypeError_(`vm.${verb}: unknown option ${String_(ks[i])} (known: ${known})`);
      }
      out[ks[i]] = opts[ks[i]];
    }
    return out;
  }

  function str(verb, what, v) {
    if (typeof v !== "string") throw new TypeError_(`vm.${verb}: ${what} must be a string, not ${typeof v}`);
    return v;
  }

  function num(verb, what, v) {
    if (typeof v !== "number" || v !== v) throw new TypeError_(`vm.${verb}: ${what} must be a number, not ${typeof v}`);
    return v;
  }

  // stringMap checks vm.recipe's params: an optional object of strings.
  function stringMap(verb, what, v) {
    if (v === undefined || v === null) return undefined;
    if (typeof v !== "object" || isArray(v)) throw new TypeError_(`vm.${verb}: ${what} must be an object of strings`);
    return v;
  }

  // shotImage checks vm.evidence.save's shot, an optional screen.shot()
  // answer, and answers its image.
  function shotImage(verb, what, v) {
    if (v === undefined || v === null) return undefined;
    return str(verb, what + ".image", v.image);
  }

  // shapers turn a call's answer into what its verb answers the script
  // (hostapi/calls.Result names them).
  const shapers = {
    stdout: (a) => a.stdout,
    stdoutIfOK: (a) => (a.ok ? a.stdout : null),
    seconds: (a) => (a && a.ok ? a.seconds : null),
    box: (a) => (a && a.ok ? { x: a.x, y: a.y, w: a.w, h: a.h } : null),
    spotIfOK: (a) => (a && a.ok ? a.text : null),
    spotIfFound: (a) => (a && a.found ? a : null),
    utf8: (a) => decodeUTF8Base64(a.base64),
    path: (a) => a.path,
  };

  // makeVM builds the vm of a run: one verb per host call, each checking
  // its options and arguments before it sends them (in the order of the
  // call's argument fields) and shaping the answer.
  function makeVM(vmid) {
    const vm = {
      vmid: vmid,
      // BEGIN GENERATED verbs: go generate ./hostapi/calls writes this part from hostapi/calls/registry.go; do not edit.
      exec(command, opts) {
        const o = options("exec", opts, ["timeout"]);
        return call("exec", { command: str("exec", "command", command), timeout: o.timeout });
      },
      expect(command, opts) {
        const o = options("expect", opts, ["timeout", "contains"]);
        return shapers.stdout(call("expect", {
          command: str("expect", "command", command),
          timeout: o.timeout,
          contains: o.contains,
        }));
      },
      check(command, opts) {
        const o = options("check", opts, ["timeout"]);
        return shapers.stdoutIfOK(call("check", { command: str("check", "command", command), timeout: o.timeout }));
      },
      run(command, opts) {
        const o = options("run", opts, ["wait", "restart"]);
        return call("run", { command: str("run", "command", command), wait: o.wait, restart: o.restart });
      },
      waitBoot(opts) {
        const o = options("waitBoot", opts, ["timeout"]);
        return shapers.seconds(call("waitBoot", { timeout: o.timeout }));
      },
      execGui(command, opts) {
        const o = options("execGui", opts, ["user"]);
        return call("execGui", { command: str("execGui", "command", command), user: o.user });
      },
      file: {
        read(path, opts) {
          const o = options("file.read", opts, ["offset", "max"]);
          return shapers.utf8(call("file.read", {
            path: str("file.read", "path", path),
            offset: o.offset,
            max: o.max,
          }));
        },
        write(path, text) {
          call("file.write", { path: str("file.write", "path", path), text: str("file.write", "text", text) });
        },
      },
      screen: {
        shot() {
          return call("screen.shot", {});
        },
        waitStill(opts) {
          const o = options("screen.waitStill", opts, ["seconds", "timeout"]);
          return shapers.seconds(call("screen.waitStill", { seconds: o.seconds, timeout: o.timeout }));
        },
        waitChange(opts) {
          const o = options("screen.waitChange", opts, ["timeout"]);
          return shapers.seconds(call("screen.waitChange", { timeout: o.timeout }));
        },
        waitWindow(window, opts) {
          const o = options("screen.waitWindow", opts, ["gone", "timeout", "user"]);
          return shapers.box(call("screen.waitWindow", {
            window: str("screen.waitWindow", "window", window),
            gone: o.gone,
            timeout: o.timeout,
            user: o.user,
          }));
        },
        read() {
          return call("screen.read", {});
        },
        waitText(label, opts) {
          const o = options("screen.waitText", opts, ["timeout"]);
          return shapers.spotIfOK(call("screen.waitText", {
            label: str("screen.waitText", "label", label),
            timeout: o.timeout,
          }));
        },
        checkText(label) {
          return shapers.spotIfFound(call("screen.checkText", { label: str("screen.checkText", "label", label) }));
        },
        expectText(label) {
          return call("screen.expectText", { label: str("screen.expectText", "label", label) });
        },
      },
      keyboard: {
        type(text) {
          call("keyboard.type", { text: str("keyboard.type", "text", text) });
        },
        press(key) {
          call("keyboard.press", { key: str("keyboard.press", "key", key) });
        },
      },
      mouse: {
        click(x, y, opts) {
          const o = options("mouse.click", opts, ["button", "count", "frame"]);
          call("mouse.click", {
            x: num("mouse.click", "x", x),
            y: num("mouse.click", "y", y),
            button: o.button,
            count: o.count,
            frame: o.frame,
          });
        },
        doubleClick(x, y, opts) {
          const o = options("mouse.doubleClick", opts, ["frame"]);
          call("mouse.doubleClick", {
            x: num("mouse.doubleClick", "x", x),
            y: num("mouse.doubleClick", "y", y),
            frame: o.frame,
          });
        },
        drag(x1, y1, x2, y2, opts) {
          const o = options("mouse.drag", opts, ["frame"]);
          call("mouse.drag", {
            x1: num("mouse.drag", "x1", x1),
            y1: num("mouse.drag", "y1", y1),
            x2: num("mouse.drag", "x2", x2),
            y2: num("mouse.drag", "y2", y2),
            frame: o.frame,
          });
        },
        move(x, y, opts) {
          const o = options("mouse.move", opts, ["frame"]);
          call("mouse.move", { x: num("mouse.move", "x", x), y: num("mouse.move", "y", y), frame: o.frame });
        },
        clickLabel(label, opts) {
          const o = options("mouse.clickLabel", opts, ["kind", "button", "count", "frame"]);
          return call("mouse.clickLabel", {
            label: str("mouse.clickLabel", "label", label),
            kind: o.kind,
            button: o.button,
            count: o.count,
            frame: o.frame,
          });
        },
      },
      power: {
        start(opts) {
          const o = options("power.start", opts, ["wait"]);
          call("power.start", { wait: o.wait });
        },
        stop(opts) {
          const o = options("power.stop", opts, ["wait"]);
          call("power.stop", { wait: o.wait });
        },
        snapshot(name, opts) {
          const o = options("power.snapshot", opts, ["wait"]);
          call("power.snapshot", { name: str("power.snapshot", "name", name), wait: o.wait });
        },
        rollback(name, opts) {
          const o = options("power.rollback", opts, ["wait"]);
          call("power.rollback", { name: str("power.rollback", "name", name), wait: o.wait });
        },
      },
      evidence: {
        save(path, shot) {
          return shapers.path(call("evidence.save", {
            path: str("evidence.save", "path", path),
            image: shotImage("evidence.save", "shot", shot),
          }));
        },
      },
      log(message) {
        call("log", { message: String_(message) });
      },
      recipe(name, params) {
        return call("recipe", { name: str("recipe", "name", name), params: stringMap("recipe", "params", params) });
      },
      sleep(seconds) {
        call("sleep", { seconds: num("sleep", "seconds", seconds) });
      },
      step(n, of, label) {
        call("step", { n: num("step", "n", n), of: num("step", "of", of), label: str("step", "label", label) });
      },
      // END GENERATED verbs
    };
    const groups = keys(vm);
    for (let i = 0; i < groups.length; i++) {
      const v = vm[groups[i]];
      if (typeof v === "object" && v !== null) freeze(v);
    }
    return freeze(vm);
  }

  function show(v) {
    if (typeof v === "string") return v;
    if (v instanceof Error_) return String_(v);
    if (typeof v === "object" && v !== null) {
      try {
        const s = stringify(v);
        if (s !== undefined) return s;
      } catch (e) {
        // circular or BigInt: fall back to String
      }
    }
    return String_(v);
  }

  function writer(level) {
    return function () {
      let line = "";
      for (let i = 0; i < arguments.length; i++) line += (i ? " " : "") + show(arguments[i]);
      consoleWrite(level, line);
    };
  }

  const console = freeze({
    log: writer("log"),
    info: writer("info"),
    debug: writer("debug"),
    warn: writer("warn"),
    error: writer("error"),
  });

  // result is the run's answer as JSON text: undefined (and functions) are null.
  function result(v) {
    const s = stringify(v);
    return s === undefined ? "null" : s;
  }

  return freeze({ makeVM, console, PoligonError, result });
})
