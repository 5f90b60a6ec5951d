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
)

//go:embed guestsh/windows.sh
var windowsBody string

// windowsScript lists the windows of a desktop session.
var windowsScript = sessionScript + windowsBody

// Window is a visible X11 window of a desktop session.
type Window struct {
	ID    string
	Box   image.Rectangle
	Title string
}

// WindowList is what the guest reported, with a note when it had to
// install xdotool first.
type WindowList struct {
	Windows   []Window
	Installed bool
}

// Windows lists the visible windows of user's X11 session whose title,
// class or class name contains pattern ("" lists all). It needs xdotool in
// the guest and installs it on first use.
func (v *VM) Windows(ctx context.Context, user, pattern string) (WindowList, error) {
	if user == "" {
		user = "test"
	}
	res, err := v.execArgs(ctx, "/bin/sh", []string{"-c", windowsScript, "poligon-windows", user, pattern}, 3*time.Minute, "window list")
	if err != nil {
		return WindowList{}, err
	}
	switch res.Exit {
	case 0:
	case 4:
		e := Failf("log in first (vm_login), or pass user= for another desktop user", "no desktop session of %s in vmid %d", user, v.info.VMID)
		e.Err = errNoSession
		return WindowList{}, e
	case 5:
		return WindowList{}, Failf("window lookups need X11: take the full frame instead (no region/window)", "the session of %s is Wayland", user)
	case 6:
		return WindowList{}, Failf("fall back to the full frame (no region/window), or install xdotool in the template", "xdotool is missing in vmid %d and could not be installed", v.info.VMID)
	default:
		return WindowList{}, Failf("", "listing windows failed: exit %d: %s", res.Exit, strings.TrimSpace(string(res.Stderr)))
	}
	var out WindowList
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if line == "installed xdotool" {
			out.Installed = true
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
		w := Window{ID: f[0], Box: image.Rect(n[0], n[1], n[0]+n[2], n[1]+n[3])}
		if len(f) == 6 {
			w.Title = f[5]
		}
		out.Windows = append(out.Windows, w)
	}
	return out, nil
}

// errNoSession marks "the user has no desktop session yet": a wait keeps
// polling through it, since a session appears a moment after a login.
var errNoSession = errors.New("no desktop session")

// WindowWait is the outcome of WaitWindow.
type WindowWait struct {
	OK        bool
	Elapsed   time.Duration
	Window    Window // the window found (not for gone)
	Installed bool
}

// WaitWindow waits until a window matching pattern is visible (gone: until
// none is), polling the guest, at most timeout.
func (v *VM) WaitWindow(ctx context.Context, pattern string, gone bool, user string, timeout time.Duration) (WindowWait, error) {
	if pattern == "" {
		return WindowWait{}, Failf("pass a substring of the window's title, class or class name", "window is empty")
	}
	release, err := v.s.lock(ctx, v.info.VMID)
	if err != nil {
		return WindowWait{}, err
	}
	defer release()
	return v.waitWindow(ctx, pattern, gone, user, timeout)
}

func (v *VM) waitWindow(ctx context.Context, pattern string, gone bool, user string, timeout time.Duration) (WindowWait, error) {
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
		res.Installed = res.Installed || list.Installed
		if gone && len(list.Windows) == 0 || !gone && len(list.Windows) > 0 {
			res.OK, res.Elapsed = true, time.Since(start)
			if !gone {
				res.Window = list.Windows[0]
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

// FindWindow answers the one window region names: an X window id, or a
// substring of its title, class or class name. No match lists the visible
// windows in the hint.
func (v *VM) FindWindow(ctx context.Context, region, user string) (Window, bool, error) {
	list, err := v.Windows(ctx, user, "")
	if err != nil {
		return Window{}, false, err
	}
	for _, w := range list.Windows {
		if w.ID == region {
			return w, list.Installed, nil
		}
	}
	match, err := v.Windows(ctx, user, region)
	if err != nil {
		return Window{}, false, err
	}
	if len(match.Windows) == 0 {
		var names []string
		for _, w := range list.Windows {
			names = append(names, fmt.Sprintf("%s %q", w.ID, w.Title))
		}
		return Window{}, false, Failf("visible windows: "+strings.Join(names, "; "), "no visible window matches %q", region)
	}
	return match.Windows[0], list.Installed || match.Installed, nil
}
