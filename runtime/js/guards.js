// Size guards on the builtins that build a large value from a small input in
// one native call. goja can interrupt JS between instructions but not inside
// a builtin, so "x".repeat(1e9) or new Float64Array(1e9) would allocate (and
// new Array(3e7).fill(0) would spin for a minute) before the time limit or
// the memory watchdog could act. Each guarded call that would go past the
// run's ceiling throws a RangeError instead. This covers the obvious cases,
// not every quadratic one; the watchdog and the time limit cover the rest.
//
// It answers setLimit(bytes): sandboxes are prepared before the run whose
// ceiling they get.
(function () {
  "use strict";
  let limitBytes, maxChars, maxElements;
  function setLimit(bytes) {
    limitBytes = bytes;
    maxChars = Math.min(bytes / 2, 1 << 24); // UTF-16 worst case
    maxElements = Math.min(bytes / 16, 1 << 22); // a goja value is at least 16 bytes
  }
  const RangeError_ = RangeError;
  const apply = Reflect.apply;
  const construct = Reflect.construct;
  const defineProperty = Object.defineProperty;
  const getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
  const getPrototypeOf = Object.getPrototypeOf;
  const setPrototypeOf = Object.setPrototypeOf;
  const toInteger = (v) => {
    const n = Math.trunc(Number(v));
    return n !== n ? 0 : n;
  };

  function tooBig(what, n, max) {
    return new RangeError_(`${what}: ${n} is over the sandbox limit of ${max}`);
  }

  function guardMethod(proto, name, check) {
    const original = proto[name];
    const guarded = {
      [name](...args) {
        check(this, args);
        return apply(original, this, args);
      },
    }[name];
    defineProperty(proto, name, { value: guarded, writable: true, enumerable: false, configurable: true });
  }

  // guardConstructor replaces a global constructor by a function that checks
  // its arguments, with the same prototype (instanceof and subclasses keep
  // working) and statics. (A Proxy would be shorter, but goja's instanceof
  // refuses proxies.) statics lists the own properties to carry over: the
  // rest is inherited through the prototype chain.
  function guardConstructor(name, statics, check) {
    const original = globalThis[name];
    if (typeof original !== "function") return undefined;
    const guarded = function (...args) {
      check(args);
      if (new.target === undefined) return apply(original, this, args);
      return construct(original, args, new.target === guarded ? original : new.target);
    };
    for (let i = 0; i < statics.length; i++) {
      const d = getOwnPropertyDescriptor(original, statics[i]);
      if (d) defineProperty(guarded, statics[i], d);
    }
    setPrototypeOf(guarded, getPrototypeOf(original));
    defineProperty(guarded, "prototype", { value: original.prototype, writable: false, enumerable: false, configurable: false });
    defineProperty(globalThis, name, { value: guarded, writable: true, enumerable: false, configurable: true });
    return original;
  }

  guardMethod(String.prototype, "repeat", (self, args) => {
    const n = String(self).length * toInteger(args[0]);
    if (n > maxChars) throw tooBig("String.prototype.repeat", n, maxChars);
  });
  for (const name of ["padStart", "padEnd"]) {
    guardMethod(String.prototype, name, (self, args) => {
      const n = toInteger(args[0]);
      if (n > maxChars) throw tooBig("String.prototype." + name, n, maxChars);
    });
  }

  const OriginalArray = guardConstructor("Array", ["name", "length", "isArray", "from", "of", Symbol.species], (args) => {
    if (args.length === 1 && typeof args[0] === "number" && args[0] > maxElements) {
      throw tooBig("Array length", args[0], maxElements);
    }
  });
  // [].constructor is a way to the original too: species creation goes
  // through it (arr.map(...)), so it gets the guard as well.
  defineProperty(OriginalArray.prototype, "constructor", { value: globalThis.Array, writable: true, enumerable: false, configurable: true });
  const arrayFrom = Array.from;
  defineProperty(globalThis.Array, "from", {
    value: function from(items, ...rest) {
      if (items !== null && items !== undefined && typeof items[Symbol.iterator] !== "function") {
        const n = toInteger(items.length);
        if (n > maxElements) throw tooBig("Array.from length", n, maxElements);
      }
      return apply(arrayFrom, this, [items, ...rest]);
    },
    writable: true, enumerable: false, configurable: true,
  });
  for (const name of ["fill", "join"]) {
    guardMethod(Array.prototype, name, (self) => {
      const n = toInteger(self.length);
      if (n > maxElements) throw tooBig("Array.prototype." + name + " on length", n, maxElements);
    });
  }

  const bytes = (what, n) => {
    if (n > limitBytes) throw tooBig(what + " bytes", n, limitBytes);
  };
  // Typed arrays and buffers keep their prototype's constructor (setting it
  // would build every prototype, a third of a run's setup time), so
  // new (new Uint8Array(0).constructor)(1e10) is not guarded: the watchdog is.
  for (const name of ["ArrayBuffer", "SharedArrayBuffer"]) {
    guardConstructor(name, ["name", "length", Symbol.species], (args) => bytes(name, toInteger(args[0])));
  }
  const typed = [
    "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array",
    "Uint32Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array",
  ];
  for (let i = 0; i < typed.length; i++) {
    const name = typed[i];
    const statics = name === "Uint8Array" ? ["name", "length", "BYTES_PER_ELEMENT", "fromBase64", "fromHex"] : ["name", "length", "BYTES_PER_ELEMENT"];
    let size = 0;
    const original = guardConstructor(name, statics, (args) => {
      if (typeof args[0] === "number") bytes(name, toInteger(args[0]) * size);
    });
    if (original) size = original.BYTES_PER_ELEMENT;
  }
  return setLimit;
})
