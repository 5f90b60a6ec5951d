#!/usr/bin/python3
# The training dataset's AT-SPI dump: what the guest's accessibility tree
# says is on the screen, as one JSON object on stdout (internal/dataset's
# Dump). atspi.sh runs it as the session's user, with the session's
# environment, from their runtime directory, under a timeout that kills it.
#
# Only showing widgets are written (VISIBLE without SHOWING is a hidden tab
# or a closed menu: not on the frame), and a subtree that is not showing is
# not walked. The walk is bounded (widgets, visited nodes, a deadline) and
# says truncated when a bound cut it short. Exit 3: AT-SPI cannot be read
# in this session at all (no pyatspi, no accessibility bus): the host does
# not ask again for a while.
import json
import os
import subprocess
import sys
import time

MAX_WIDGETS, MAX_NODES, DEADLINE = 6000, 20000, 20.0
MAX_NAME = 500  # characters of a name: a label, not a document
start = time.monotonic()
took = {}  # seconds by phase, for the host's log line


def since_exec():
    """Seconds from the process's start to here: the interpreter's own start-up."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return round(up - ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


took["python"] = since_exec()


def lap(phase, since):
    took[phase] = round(time.monotonic() - since, 3)
    return time.monotonic()


def screen():
    w, _, h = os.environ.get("POLIGON_SCREEN", "").partition("x")
    return [int(w), int(h)] if w.isdigit() and h.isdigit() else [0, 0]


def session_type():
    t = os.environ.get("XDG_SESSION_TYPE", "")
    if t in ("x11", "wayland"):
        return t
    return "wayland" if os.environ.get("WAYLAND_DISPLAY") else "x11"


def theme():
    """light or dark, from the session's GTK theme; "" when it cannot be told."""
    name = os.environ.get("GTK_THEME", "")
    probes = (["gsettings", "get", "org.gnome.desktop.interface", "gtk-theme"],
              ["xfconf-query", "-c", "xsettings", "-p", "/Net/ThemeName"])
    for cmd in probes:
        if name:
            break
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=3)
            if r.returncode == 0:
                name = r.stdout.strip().strip("'")
        except (OSError, subprocess.SubprocessError):
            pass
    if not name:
        return ""
    return "dark" if "dark" in name.lower() else "light"


out = {
    "screen": screen(),
    "locale": os.environ.get("LC_ALL") or os.environ.get("LC_MESSAGES") or os.environ.get("LANG", ""),
    "desktop": os.environ.get("XDG_CURRENT_DESKTOP", ""),
    "session_type": session_type(),
    "focused": None,
    "truncated": False,
    "widgets": [],
}


def finish(code=0):
    out["took"] = took
    json.dump(out, sys.stdout, ensure_ascii=True)
    sys.stdout.write("\n")
    sys.exit(code)


try:
    import pyatspi
    from gi.repository import Atspi
except Exception as e:  # ImportError, or gi's ValueError for a missing typelib
    out["error"] = "python3 has no pyatspi (%s): install python3-pyatspi (Debian) or python3-module-pyatspi (ALT)" % e
    finish(3)
t = lap("import", start)

try:
    Atspi.set_timeout(2000, 10000)  # per D-Bus call: a hung application costs 2 s, not 25
except Exception:
    pass


def nick(state):
    return getattr(state, "value_nick", None) or str(state).lower().replace("state_", "")


def role_name(node):
    """The role's name without a D-Bus round trip where the library knows it."""
    try:
        return Atspi.role_get_name(node.get_role())
    except Exception:
        return node.getRoleName()


def walk(desk):
    widgets, active_app, skipped = out["widgets"], "", 0
    stack = [(desk.getChildAtIndex(i), 1, None) for i in reversed(range(desk.childCount))]
    visited = 0
    out["visited"] = 0
    while stack:
        if visited >= MAX_NODES or len(widgets) >= MAX_WIDGETS or time.monotonic() - start > DEADLINE:
            out["truncated"] = True
            break
        node, depth, app = stack.pop()
        visited += 1
        out["visited"] = visited
        if node is None:
            continue
        try:
            if app is None:  # an application: no state or box of its own
                name = node.name or ""
                stack.extend((node.getChildAtIndex(i), depth + 1, name) for i in reversed(range(node.childCount)))
                continue
            states = node.getState()
            if not states.contains(pyatspi.STATE_SHOWING):
                continue  # nor is anything inside it
            names = sorted(nick(s) for s in states.getStates())
            try:
                x, y, w, h = node.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
            except NotImplementedError:
                w = h = 0
            if w > 0 and h > 0:
                widget = {"app": app, "role": role_name(node), "name": (node.name or "")[:MAX_NAME],
                          "x": x, "y": y, "w": w, "h": h, "states": names, "depth": depth}
                widgets.append(widget)
                if "focused" in names:
                    out["focused"] = widget
                if "active" in names and depth == 2:  # the active window's application
                    active_app = app
            stack.extend((node.getChildAtIndex(i), depth + 1, app) for i in reversed(range(node.childCount)))
        except Exception:  # a widget that went away while it was read
            skipped += 1
    return active_app, skipped


try:
    desk = pyatspi.Registry.getDesktop(0)
    if desk.childCount == 0:
        out["error"] = "no application on the accessibility bus (at-spi2-core not running, or NO_AT_BRIDGE set in the session)"
        finish(3)
    active, skipped = walk(desk)
except Exception as e:
    out["error"] = "the accessibility bus cannot be read: %s" % e
    finish(3)
t = lap("walk", t)
if out["focused"] is not None:
    active = out["focused"]["app"]
out["app"] = active
out["theme"] = theme()
lap("theme", t)
if skipped:
    out["skipped"] = skipped
finish()
