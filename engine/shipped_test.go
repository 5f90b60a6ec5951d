package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/recipes"
	"github.com/poligon/poligon/runtime"
	"github.com/poligon/poligon/runtime/js"
	"github.com/poligon/poligon/scripts"
)

// A step the fake guest expects: the call, a substring of its arguments,
// and the answer (JSON) or error it gives.
type step struct {
	call, args, answer, err string
}

// stepHost answers a script's calls from a script of steps, in order, as a
// desktop guest would. Any other call fails the run (it runs on the
// script's goroutine: the mismatch is reported by the test afterwards).
type stepHost struct {
	steps    []step
	next     int
	mismatch string
}

func (h *stepHost) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	if h.next >= len(h.steps) {
		h.mismatch = fmt.Sprintf("unexpected call %d: %s %s", h.next+1, name, args)
		return nil, errors.New(h.mismatch)
	}
	s := h.steps[h.next]
	h.next++
	if name != s.call || !strings.Contains(string(args), s.args) {
		h.mismatch = fmt.Sprintf("call %d: got %s %s, want %s with %q", h.next, name, args, s.call, s.args)
		return nil, errors.New(h.mismatch)
	}
	if s.err != "" {
		return nil, &runtime.HostError{Call: name, Message: s.err}
	}
	if s.answer == "" {
		return json.RawMessage(`{}`), nil
	}
	return json.RawMessage(s.answer), nil
}

// runShipped runs a shipped script against steps and answers its value.
func runShipped(t *testing.T, file string, params map[string]string, steps []step) (string, error) {
	t.Helper()
	var src []byte
	for _, fsys := range []fs.FS{scripts.FS, recipes.FS} {
		if b, err := fs.ReadFile(fsys, file); err == nil {
			src = b
		}
	}
	m, err := js.Load(file, src, js.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &stepHost{steps: steps}
	res, err := m.Run(context.Background(), runtime.Run{Host: h, Params: params, VMID: 130, Clock: time.Unix(0, 0),
		Limits: runtime.Limits{Timeout: 10 * time.Second}})
	if h.mismatch != "" {
		t.Fatal(h.mismatch)
	}
	if err == nil && h.next != len(h.steps) {
		t.Fatalf("the script stopped after %d of %d expected calls", h.next, len(h.steps))
	}
	var s string
	json.Unmarshal(res.Value, &s)
	return s, err
}

const (
	ok    = `{"exit":0,"stdout":"","stderr":""}`
	still = `{"ok":true,"seconds":1}`
)

// Answers of the fake desktop guest's screen and checks.
const (
	showsText = `{"frame":"f","width":1280,"height":800,"lines":[{"text":"test","x":640,"y":360}]}`
	blank     = `{"frame":"f","width":1280,"height":800,"lines":[]}`
	absent    = `{"ok":false,"exit":1,"stdout":"","stderr":""}`
)

func found(stdout string) string {
	return fmt.Sprintf(`{"ok":true,"exit":0,"stdout":%q,"stderr":""}`, stdout)
}

// A greeter on a user list (GDM, lightdm-kde): Enter selects the user,
// then the password, once the greeter shows text (a black screen first:
// the X server before its greeter draws); the login answers once the
// session's last process runs and its desktop shows text.
func TestShippedLoginPicksTheSession(t *testing.T) {
	out, err := runShipped(t, "login.js", map[string]string{"session": "mate", "password": "pw'1"}, []step{
		{"expect", `id -u test`, `{"exit":0,"stdout":"1000\n","stderr":""}`, ""},
		{"check", `/usr/share/xsessions`, found("mate\nxfce\n"), ""},
		{"expect", `'test' 'pw'\\''1' | chpasswd`, ok, ""},
		{"expect", `Session=mate`, ok, ""},
		{"expect", `printf '[Desktop]\nSession=mate\n' > \"$h/.dmrc\"`, ok, ""},
		{"check", `pgrep -x 'lightdm-gtk-gre|lightdm-kde-gre|slick-greeter|sddm-greeter'`, found(""), ""},
		{"screen.read", ``, blank, ""},
		{"sleep", ``, "", ""},
		{"screen.read", ``, showsText, ""},
		{"screen.waitStill", `"seconds":2`, still, ""},
		{"check", `pgrep -x lightdm-gtk-gre`, absent, ""},
		{"keyboard.press", `"ret"`, "", ""},
		{"screen.waitStill", ``, still, ""},
		{"keyboard.type", `"pw'1"`, "", ""},
		{"keyboard.press", `"ret"`, "", ""},
		{"check", `pgrep -u test -x 'mate-session'`, found("4242\n"), ""},
		{"expect", `ps -o comm= -p 4242`, `{"exit":0,"stdout":"mate-session\n","stderr":""}`, ""},
		{"check", `pgrep -u test -x 'mate-panel'`, found(""), ""},
		{"screen.read", ``, showsText, ""},
		{"screen.waitStill", `"seconds":3`, still, ""},
		{"screen.shot", ``, `{"image":"shot-1","width":1280,"height":800,"digest":"x"}`, ""},
	})
	if err != nil || out != "test logged in: mate-session" {
		t.Fatalf("login = %q, %v", out, err)
	}
	if _, err := runShipped(t, "login.js", map[string]string{"session": "kde"}, nil); err == nil || !strings.Contains(err.Error(), "unknown session kde") {
		t.Fatalf("an unknown session: %v", err)
	}
}

// lightdm's GTK greeter (debian-desktop) opens on the password of the
// listed user: no Enter before the password, which would submit an empty
// one; without its user list, the name first.
func TestShippedLoginOnTheGTKGreeter(t *testing.T) {
	for _, hidden := range []bool{false, true} {
		steps := []step{
			{"expect", `id -u test`, ok, ""},
			{"check", `/usr/share/xsessions`, found("lightdm-xsession\nxfce\n"), ""},
			{"expect", `chpasswd`, ok, ""},
			{"expect", `Session=xfce`, ok, ""},
			{"expect", `.dmrc`, ok, ""},
			{"check", `pgrep -u gdm,Debian-gdm -x gnome-shell`, found(""), ""},
			{"screen.read", ``, showsText, ""},
			{"screen.waitStill", ``, still, ""},
			{"check", `pgrep -x lightdm-gtk-gre`, found(""), ""},
		}
		if hidden {
			steps = append(steps, step{"check", `greeter-hide-users=true`, found(""), ""},
				step{"keyboard.type", `"test"`, "", ""}, step{"keyboard.press", `"ret"`, "", ""}, step{"screen.waitStill", ``, still, ""})
		} else {
			steps = append(steps, step{"check", `greeter-hide-users=true`, absent, ""})
		}
		steps = append(steps,
			step{"keyboard.type", `"secret"`, "", ""},
			step{"keyboard.press", `"ret"`, "", ""},
			step{"check", `pgrep -u test -x 'xfce4-session'`, found("433\n"), ""},
			step{"expect", `ps -o comm= -p 433`, `{"exit":0,"stdout":"xfce4-session\n","stderr":""}`, ""},
			step{"check", `pgrep -u test -x 'xfdesktop'`, found(""), ""},
			step{"screen.read", ``, showsText, ""},
			step{"screen.waitStill", ``, still, ""},
			step{"screen.shot", ``, `{"image":"shot-1","width":1280,"height":800,"digest":"x"}`, ""},
		)
		out, err := runShipped(t, "login.js", map[string]string{"session": "xfce", "password": "secret"}, steps)
		if err != nil || out != "test logged in: xfce4-session" {
			t.Fatalf("login (users hidden %v) = %q, %v", hidden, out, err)
		}
	}
}

func TestShippedLoginFailsWithoutTheSession(t *testing.T) {
	_, err := runShipped(t, "login.js", map[string]string{"session": "gnome"}, []step{
		{"expect", `id -u test`, ok, ""},
		{"check", `/usr/share/xsessions`, found("gnome\n"), ""},
		{"expect", `chpasswd`, ok, ""},
		{"expect", `Session=gnome`, ok, ""},
		{"expect", `.dmrc`, ok, ""},
		{"check", `seq 120`, absent, ""},
		{"log", `no greeter process known to this script after 120 s`, "", ""},
		{"screen.read", ``, showsText, ""},
		{"screen.waitStill", ``, still, ""},
		{"check", `lightdm-gtk-gre`, absent, ""},
		{"keyboard.press", `ret`, "", ""},
		{"screen.waitStill", ``, still, ""},
		{"keyboard.type", `test`, "", ""},
		{"keyboard.press", `ret`, "", ""},
		{"check", `gnome-shell`, absent, ""},
	})
	if err == nil || !strings.Contains(err.Error(), "no gnome-shell of test after 60 s") {
		t.Fatalf("a login that did not go through: %v", err)
	}
	// A session the guest does not have is refused before anything
	// changes in it, naming the ones it has.
	_, err = runShipped(t, "login.js", map[string]string{"session": "gnome"}, []step{
		{"expect", `id -u test`, ok, ""},
		{"check", `/usr/share/xsessions`, found("lightdm-xsession\nxfce\n"), ""},
	})
	var se *runtime.ScriptError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "session gnome is not installed on this guest (its sessions: lightdm-xsession, xfce)") ||
		!strings.Contains(se.Hint, "or session=xfce") {
		t.Fatalf("a session the guest lacks: %v", err)
	}
}

func TestShippedGnomeLoginIsTheLoginRecipe(t *testing.T) {
	out, err := runShipped(t, "gnome_login.js", nil, []step{
		{"recipe", `{"name":"login","params":{"user":"test","password":"test","session":"gnome"}}`, `"test logged in: gnome-shell"`, ""},
	})
	if err != nil || out != "test logged in: gnome-shell" {
		t.Fatalf("gnome_login = %q, %v", out, err)
	}
}

func TestShippedInstallPicksUpItsRun(t *testing.T) {
	apt := `apt-get install -y kcalc mc`
	out, err := runShipped(t, "install.js", map[string]string{"packages": " kcalc  mc "}, []step{
		{"waitBoot", ``, `{"ok":true,"seconds":0}`, ""},
		{"run", apt, `{"state":"running","exit":0,"seconds":40,"tail":"Unpacking kcalc"}`, ""},
	})
	if err != nil || !strings.HasPrefix(out, "still installing after 40 s: call vm_install again") {
		t.Fatalf("install, first call = %q, %v", out, err)
	}
	out, err = runShipped(t, "install.js", map[string]string{"packages": "kcalc mc"}, []step{
		{"waitBoot", ``, `{"ok":true,"seconds":0}`, ""},
		{"run", apt, `{"state":"done","exit":0,"seconds":75,"tail":""}`, ""},
		{"expect", `rpm -q kcalc mc`, `{"exit":0,"stdout":"kcalc-23.08-alt1.x86_64\nmc-4.8-alt1.x86_64\n","stderr":""}`, ""},
	})
	if err != nil || out != "kcalc-23.08-alt1.x86_64\nmc-4.8-alt1.x86_64" {
		t.Fatalf("install, second call = %q, %v", out, err)
	}
	if _, err := runShipped(t, "install.js", map[string]string{"packages": "kcalc; rm -rf /"}, nil); err == nil || !strings.Contains(err.Error(), "is not a package name") {
		t.Fatalf("a package name with a shell command: %v", err)
	}
}

func TestShippedUpdateProvesTheReboot(t *testing.T) {
	up := `--force-confold dist-upgrade -y`
	out, err := runShipped(t, "update.js", nil, []step{
		{"run", up, `{"state":"running","exit":0,"seconds":50,"tail":""}`, ""},
		{"run", up, `{"state":"done","exit":0,"seconds":80,"tail":""}`, ""},
		{"expect", `touch /run/poligon-before-reboot`, ok, ""},
		{"exec", `reboot`, ok, ""},
		{"sleep", ``, "", ""},
		{"waitBoot", `240`, `{"ok":true,"seconds":30}`, ""},
		{"expect", `test ! -e /run/poligon-before-reboot`, ok, ""},
		{"expect", `uname -r`, `{"exit":0,"stdout":"6.12.1-alt1\n","stderr":""}`, ""},
	})
	if err != nil || out != "6.12.1-alt1" {
		t.Fatalf("update = %q, %v", out, err)
	}
}

func TestShippedEnableService(t *testing.T) {
	out, err := runShipped(t, "enable_service.js", map[string]string{"service": "nginx"}, []step{
		{"expect", `systemctl enable --now nginx`, ok, ""},
		{"expect", `systemctl is-active nginx`, `{"exit":0,"stdout":"active\n","stderr":""}`, ""},
	})
	if err != nil || out != "active" {
		t.Fatalf("enable_service = %q, %v", out, err)
	}
}
