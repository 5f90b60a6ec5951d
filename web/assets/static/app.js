// poligon's pages: the live parts. No framework, no inline script (the
// Content-Security-Policy forbids it); text goes into the page as text,
// never as HTML.
"use strict";

(function () {
  const csrfMeta = document.querySelector('meta[name="csrf"]');
  const csrf = csrfMeta ? csrfMeta.content : "";

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (r.status === 401) { location.href = "/ui/login"; throw new Error("logged out"); }
    if (!r.ok) throw new Error(url + ": " + r.status);
    return r.json();
  }

  // every polls fn every ms, one call at a time.
  function every(ms, fn) {
    const tick = async () => {
      try { await fn(); } catch (e) { /* the next tick tries again */ }
      setTimeout(tick, ms);
    };
    setTimeout(tick, ms);
  }

  const pages = {};

  // The login form: poligon ui prints a link whose fragment (never sent to
  // the server, so never in a log) holds a one-time token.
  pages.login = function () {
    const m = /^#token=([A-Za-z0-9_-]+)$/.exec(location.hash);
    if (!m) return;
    history.replaceState(null, "", location.pathname);
    if (document.getElementById("login-error")) return; // it was refused: do not loop
    document.getElementById("token").value = m[1];
    document.getElementById("login-form").submit();
  };

  pages.vms = function () {
    const table = document.getElementById("vms");
    const body = table.tBodies[0];
    every(2000, async () => {
      const data = await getJSON(table.dataset.src);
      const rows = data.vms.map((v) => el("tr", { "data-key": v.bench + "/" + v.vmid },
        el("td", {}, v.bench), el("td", {}, v.vmid),
        el("td", {}, el("a", { href: "/ui/vm/" + encodeURIComponent(v.bench) + "/" + v.vmid }, v.name)),
        el("td", { class: "status status-" + v.status }, v.status + (v.note ? " (" + v.note + ")" : ""))));
      if (rows.length === 0) rows.push(el("tr", { class: "empty" }, el("td", { colspan: "4" }, "No VMs of yours: vm_clone makes one.")));
      body.replaceChildren(...rows);
      const problems = document.getElementById("problems");
      problems.replaceChildren(...(data.problems || []).map((p) => el("p", { class: "problem" }, "bench " + p.bench + ": " + p.error)));
    });
  };

  pages.stand = function () {
    const root = document.getElementById("stand");
    const bench = root.dataset.bench;
    every(1000, async () => {
      const v = await getJSON(root.dataset.src);
      const status = document.getElementById("stand-status");
      status.textContent = v.status;
      status.className = "status status-" + v.status;
      document.getElementById("stand-seconds").textContent = Math.round(v.seconds);
      const machines = v.machines.map((m) => {
        const small = el("small", {}, m.template);
        if (m.vmid) small.append(" · ", el("a", { href: "/ui/vm/" + encodeURIComponent(bench) + "/" + m.vmid }, "vmid " + m.vmid));
        if (m.ip) small.append(" · " + m.ip);
        const steps = m.steps.map((s) => el("li", { class: "step step-" + s.status, "data-n": s.n },
          el("span", { class: "label" }, s.label), " ", el("span", { class: "status" }, s.status),
          s.seconds ? el("span", { class: "secs" }, " " + s.seconds.toFixed(1) + " s") : null,
          s.error ? el("span", { class: "problem" }, " " + s.error) : null));
        return el("section", { class: "machine" },
          el("h2", {}, m.role + " ", small, " ", el("span", { class: "status status-" + m.status }, m.status)),
          m.error ? el("p", { class: "problem" }, m.error) : null,
          el("ol", { class: "steps" }, ...steps));
      });
      document.getElementById("machines").replaceChildren(...machines);
    });
  };

  // qemu sendkey names of the keys a browser names.
  const keyNames = {
    Enter: "ret", Backspace: "backspace", Tab: "tab", Escape: "esc", Delete: "delete", Insert: "insert",
    Home: "home", End: "end", PageUp: "pgup", PageDown: "pgdn",
    ArrowUp: "up", ArrowDown: "down", ArrowLeft: "left", ArrowRight: "right", " ": "spc",
  };
  for (let i = 1; i <= 12; i++) keyNames["F" + i] = "f" + i;

  pages.vm = function () {
    const canvas = document.getElementById("console");
    const g = canvas.getContext("2d");
    const status = document.getElementById("console-status");
    const control = document.getElementById("control");
    const inputStatus = document.getElementById("input-status");
    let frames = 0;
    let drawing = Promise.resolve();

    function connect() {
      const url = new URL(canvas.dataset.ws, location.href);
      url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
      const ws = new WebSocket(url);
      ws.binaryType = "arraybuffer";
      ws.onopen = () => { status.textContent = "live"; };
      ws.onmessage = (ev) => {
        if (typeof ev.data === "string") {
          const m = JSON.parse(ev.data);
          status.textContent = m.status ? "console: " + m.status : "live";
          return;
        }
        const d = new DataView(ev.data);
        const kind = d.getUint8(0);
        const x = d.getUint16(1), y = d.getUint16(3), w = d.getUint16(5), h = d.getUint16(7);
        const fw = d.getUint16(9), fh = d.getUint16(11);
        const changed = Number(d.getBigUint64(13));
        const blob = new Blob([new Uint8Array(ev.data, 21)], { type: kind === 2 ? "image/jpeg" : "image/png" });
        // Drawn in the order they came: a later change lands on an earlier.
        drawing = drawing.then(() => createImageBitmap(blob)).then((bmp) => {
          if (canvas.width !== fw || canvas.height !== fh) { canvas.width = fw; canvas.height = fh; }
          g.drawImage(bmp, x, y);
          bmp.close();
          frames++;
          canvas.dataset.frames = String(frames);
          canvas.dispatchEvent(new CustomEvent("poligon:frame", { detail: { changed: changed, drawn: Date.now(), x: x, y: y, w: w, h: h } }));
        }).catch(() => {});
      };
      ws.onclose = (ev) => {
        if (ev.code === 1008) { status.textContent = "logged out: reload the page"; return; }
        status.textContent = "disconnected: reconnecting…";
        setTimeout(connect, 2000);
      };
    }
    connect();

    // Input: in order, one request at a time; typed characters are sent
    // together as they come.
    let sending = Promise.resolve();
    function send(input) {
      sending = sending.then(async () => {
        const r = await fetch(canvas.dataset.input, {
          method: "POST", credentials: "same-origin",
          headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
          body: JSON.stringify(input),
        });
        let answer = {};
        try { answer = await r.json(); } catch (e) { /* not JSON */ }
        inputStatus.textContent = r.ok ? "" : (answer.error || ("refused: " + r.status)) + (answer.hint ? " — " + answer.hint : "");
        inputStatus.className = r.ok ? "" : "problem";
      }).catch((e) => { inputStatus.textContent = String(e); });
      return sending;
    }
    let typed = "";
    let typeTimer = null;
    function flushTyped() {
      clearTimeout(typeTimer);
      typeTimer = null;
      if (typed) { const t = typed; typed = ""; send({ kind: "type", text: t }); }
    }

    canvas.addEventListener("keydown", (e) => {
      if (!control.checked) return;
      const mods = (e.ctrlKey ? "ctrl-" : "") + (e.altKey ? "alt-" : "") + (e.metaKey ? "meta_l-" : "");
      if (!mods && e.key.length === 1) {
        e.preventDefault();
        typed += e.key;
        if (!typeTimer) typeTimer = setTimeout(flushTyped, 40);
        return;
      }
      let name = keyNames[e.key];
      if (!name && e.key.length === 1) name = e.key.toLowerCase();
      if (!name) return; // a modifier alone
      e.preventDefault();
      flushTyped();
      send({ kind: "key", key: (e.shiftKey && e.key.length !== 1 ? "shift-" : "") + mods + name });
    });

    function point(e) {
      const r = canvas.getBoundingClientRect();
      return [Math.floor((e.clientX - r.left) * canvas.width / r.width), Math.floor((e.clientY - r.top) * canvas.height / r.height)];
    }
    let down = null;
    canvas.addEventListener("contextmenu", (e) => { if (control.checked) e.preventDefault(); });
    canvas.addEventListener("mousedown", (e) => {
      if (!control.checked) return;
      canvas.focus();
      down = { p: point(e), button: e.button };
      e.preventDefault();
    });
    canvas.addEventListener("mouseup", (e) => {
      if (!control.checked || !down) return;
      const p = point(e), d = down;
      down = null;
      flushTyped();
      if (Math.abs(p[0] - d.p[0]) + Math.abs(p[1] - d.p[1]) > 4 && d.button === 0) {
        send({ kind: "drag", x: d.p[0], y: d.p[1], x2: p[0], y2: p[1] });
      } else {
        send({ kind: "click", x: d.p[0], y: d.p[1], button: ["left", "middle", "right"][d.button] || "left", count: 1 });
      }
    });
    control.addEventListener("change", () => { if (control.checked) canvas.focus(); });

    // The trace so far, and the steps that follow.
    const trace = document.getElementById("trace");
    const body = trace.tBodies[0];
    let last = 0;
    for (const tr of body.rows) last = Math.max(last, Number(tr.dataset.id) || 0);
    function thumb(digest, alt) {
      if (!digest) return el("td", {});
      const src = trace.dataset.frames + digest;
      return el("td", {}, el("a", { href: src }, el("img", { class: "thumb", alt: alt, src: src })));
    }
    every(2000, async () => {
      const data = await getJSON(trace.dataset.src + "?after=" + last);
      for (const s of data.steps) {
        last = Math.max(last, s.id);
        body.append(el("tr", { "data-id": s.id, class: "outcome-" + s.outcome },
          el("td", {}, s.at), el("td", {}, s.source), el("td", {}, s.caller), el("td", {}, s.call),
          el("td", {}, el("code", {}, JSON.stringify(s.args))), el("td", {}, s.outcome + (s.error ? ": " + s.error : "")),
          el("td", {}, s.took), thumb(s.before, "before"), thumb(s.after, "after")));
      }
    });
  };

  document.addEventListener("DOMContentLoaded", () => {
    const page = pages[document.body.dataset.page];
    if (page) page();
  });
})();
