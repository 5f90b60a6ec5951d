package hostapi

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"image"
	"strconv"
	"strings"
	"time"

	"github.com/poligon/poligon/hostapi/calls"
)

//go:embed guestsh/windows.sh
var windowsBody string

// windowsScript lists the windows of a desktop session.
var windowsScript = sessionScript + windowsBody

// Window is a visible X11 window of a desktop session.
type Window struct {
	ID    string
	Box   image.Rectangle // where it is on the screen; zero when Unplaced
	Title string
	// Unplaced says why the guest could not place the window (nil: Box is
	// where it is), with a hint on what to install.
	Unplaced error
}

// Windows lists the visible windows of user's X11 session whose title,
// class or class name contains pattern ("" lists all). It needs xdotool in
// the guest, and xwininfo to place them; it installs neither (read-only
// tools call it): the errors say how.
func (v *VM) Windows(ctx context.Context, user, pattern string) ([]Window, error) {
	if user == "" {
		user = calls.DefaultString(calls.WaitWindow, "user")
	}
	res, err := v.execArgs(ctx, "/bin/sh", []string{"-c", windowsScript, "poligon-windows", user, pattern}, time.Minute, "window list")
	if err != nil {
		return nil, err
	}
	pm, list := parseWindows(string(res.Stdout), v.info.VMID)
	switch res.Exit {
	case 0:
		return list, nil
	case 4:
		e := Failf("log in first (vm_login), or pass user= for another desktop user", "no desktop session of %s in vmid %d", user, v.info.VMID)
		e.Err = errNoSession
		return nil, e
	case 5:
		return nil, Failf("window lookups need X11: take the full frame instead (no region/window)", "the session of %s is Wayland", user)
	case 6:
		return nil, Failf("install it with vm_exec: "+installCommand(pm, "xdotool")+"; or take the full frame (no region/window)", "xdotool is missing in vmid %d: finding windows needs it", v.info.VMID)
	default:
		return nil, Failf("", "listing windows failed: exit %d: %s", res.Exit, strings.TrimSpace(string(res.Stderr)))
	}
}

// parseWindows reads windows.sh's output: the package manager line, then
// "id x y w h title" per window ("? ?" for x y: unplaced).
func parseWindows(out string, vmid int) (pm string, list []Window) {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if p, ok := strings.CutPrefix(line, "pm "); ok {
			pm = p
			continue
		}
		f := strings.SplitN(line, " ", 6)
		if len(f) < 5 {
			continue
		}
		n := make([]int, 4)
		for i := range n {
			n[i], _ = strconv.Atoi(f[i+1])
		}
		w := Window{ID: f[0]}
		if len(f) == 6 {
			w.Title = f[5]
		}
		if f[1] == "?" {
			w.Unplaced = Failf("install it with vm_exec: "+installCommand(pm, "xwininfo")+"; or take the full frame (no region)",
				"xwininfo is missing in vmid %d: without it the position of window %s (%q) is unknown (xdotool's own is off by the title bar under a window manager that reparents)", vmid, w.ID, w.Title)
		} else {
			w.Box = image.Rect(n[0], n[1], n[0]+n[2], n[1]+n[3])
		}
		list = append(list, w)
	}
	return pm, list
}

// installers are the package managers windows.sh looks for, in its order,
// with the package that has xwininfo (xdotool is xdotool everywhere).
var installers = []struct{ pm, cmd, xwininfo, where string }{
	{"apt-get", "apt-get install -y", "x11-utils", "Debian, Ubuntu"},
	{"dnf", "dnf install -y", "xwininfo", "Fedora, RHEL"},
	{"zypper", "zypper --non-interactive install", "xwininfo", "openSUSE"},
	{"apk", "apk add", "xwininfo", "Alpine"},
}

// installCommand answers the command that installs tool (xdotool or
// xwininfo) with the guest's package manager pm, or one per distribution
// family when the guest has none of them.
func installCommand(pm, tool string) string {
	var all []string
	for _, in := range installers {
		pkg := tool
		if tool == "xwininfo" {
			pkg = in.xwininfo
		}
		c := fmt.Sprintf("%q", in.cmd+" "+pkg)
		if in.pm == pm {
			return c
		}
		all = append(all, c+" ("+in.where+")")
	}
	return strings.Join(all, ", ")
}

// errNoSession marks "the user has no desktop session yet": a wait keeps
// polling through it, since a session appears a moment after a login.
var errNoSession = errors.New("no desktop session")

// WindowWait is the outcome of WaitWindow.
type WindowWait struct {
	OK      bool
	Elapsed time.Duration
	Window  Window // the window found (not for gone)
}

// WaitWindow waits until a window matching pattern is visible (gone: until
// none is), polling the guest, at most timeout.
func (v *VM) WaitWindow(ctx context.Context, pattern string, gone bool, user string, timeout time.Duration) (WindowWait, error) {
	if pattern == "" {
		return WindowWait{}, Failf("pass a substring of the window's title, class or class name", "window is empty")
	}
	timeout = v.c.clampWait(timeout)
	start := time.Now() // a timeout of 0 looks once
	deadline := start.Add(timeout)
	var res WindowWait
	for {
		list, err := v.Windows(ctx, user, pattern)
		if errors.Is(err, errNoSession) && gone {
			err = nil // no session, no window
		}
		if err != nil && (!errors.Is(err, errNoSession) || time.Now().After(deadline) || ctx.Err() != nil) {
			return WindowWait{}, err
		}
		if gone && len(list) == 0 || !gone && len(list) > 0 {
			res.OK, res.Elapsed = true, time.Since(start)
			if !gone {
				res.Window = list[0]
			}
			return res, nil
		}
		if time.Now().After(deadline) {
			res.Elapsed = time.Since(start)
			return res, nil
		}
		select {
		case <-ctx.Done():
			res.Elapsed = time.Since(start)
			return res, nil
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// FindWindow answers the one window region names, placed on the screen: an
// X window id, or a substring of its title, class or class name. No match
// lists the visible windows in the hint.
func (v *VM) FindWindow(ctx context.Context, region, user string) (Window, error) {
	list, err := v.Windows(ctx, user, "")
	if err != nil {
		return Window{}, err
	}
	var found []Window
	for _, w := range list {
		if w.ID == region {
			found = []Window{w}
		}
	}
	if found == nil {
		if found, err = v.Windows(ctx, user, region); err != nil {
			return Window{}, err
		}
	}
	if len(found) == 0 {
		var names []string
		for _, w := range list {
			names = append(names, fmt.Sprintf("%s %q", w.ID, w.Title))
		}
		return Window{}, Failf("visible windows: "+strings.Join(names, "; "), "no visible window matches %q", region)
	}
	return found[0], found[0].Unplaced
}
