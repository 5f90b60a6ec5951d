// poligon/text: helpers for the text commands answer.
"use strict";

/** The lines of text, without the final empty line a trailing newline leaves. CRLF counts as one break. */
function lines(text) {
  const s = String(text);
  if (s === "") return [];
  const out = s.split(/\r?\n/);
  if (out[out.length - 1] === "") out.pop();
  return out;
}

/** The whitespace-separated fields of one line. */
function fields(line) {
  const s = String(line).trim();
  return s === "" ? [] : s.split(/\s+/);
}

/** The lines of text that contain pattern (a string) or match it (a RegExp). */
function grep(text, pattern) {
  const test = pattern instanceof RegExp
    ? (l) => { pattern.lastIndex = 0; return pattern.test(l); }
    : (l) => l.indexOf(String(pattern)) >= 0;
  return lines(text).filter(test);
}

/**
 * KEY=value lines (os-release, env files, systemctl show) as an object.
 * Blank lines and # comments are skipped; one pair of surrounding quotes is removed.
 */
function keyValues(text) {
  const out = {};
  for (const l of lines(text)) {
    const t = l.trim();
    if (t === "" || t[0] === "#") continue;
    const eq = t.indexOf("=");
    if (eq <= 0) continue;
    let v = t.slice(eq + 1).trim();
    if (v.length >= 2 && (v[0] === '"' || v[0] === "'") && v[v.length - 1] === v[0]) v = v.slice(1, -1);
    out[t.slice(0, eq).trim()] = v;
  }
  return out;
}

module.exports = Object.freeze({ lines, fields, grep, keyValues });
