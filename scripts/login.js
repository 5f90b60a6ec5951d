// vm_login: log into the graphical session through the display manager.
/// <reference path="../stdlib/poligon.d.ts" />

// The process that proves each session is up, and its AccountsService name.
// ready is the process that starts last in a session: its desktop is drawn once that runs and the screen settles.
const sessions = {
  gnome: { process: "gnome-shell", desktop: "gnome", ready: "gnome-shell" },
  plasma: { process: "plasmashell", desktop: "plasma", ready: "plasmashell" },
  mate: { process: "mate-session", desktop: "mate", ready: "mate-panel" },
  xfce: { process: "xfce4-session", desktop: "xfce", ready: "xfdesktop" },
};

// Any of these running means a desktop session is up (session=auto).
const anySession = "gnome-shell|plasmashell|mate-session|xfce4-session|cinnamon-session|lxqt-session";

// waitDrawn waits until what (the greeter, the desktop) is drawn: the screen shows text (a clock, a name, a button,
// a panel) and holds still. An X server shows a black screen well before its greeter draws (some 20 s under TCG),
// and a session's processes run a while before its desktop draws; those black screens are still too. Without OCR
// it waits for a still screen only.
function waitDrawn(vm, what, seconds) {
  for (let i = 0; i < 90; i++) {
    let lines;
    try {
      lines = vm.screen.read().lines;
    } catch (e) {
      vm.log(`cannot read the screen, so not waiting for the ${what}'s text: ${e.message}`);
      break;
    }
    if (lines.length > 0) {
      break;
    }
    if (i === 89) {
      throw new PoligonError("login", `no ${what} on the screen after 90 s: it shows no text`,
        "look at the screen (ui_screenshot) and at the display manager in the guest (systemctl status display-manager)");
    }
    vm.sleep(1);
  }
  vm.screen.waitStill({ seconds, timeout: 60 });
}

/** @type {poligon.Script} */
module.exports = {
  name: "login",
  description:
    "Log into the graphical session through the display manager (GDM and lightdm-kde take Enter, password, Enter; " +
    "lightdm's GTK greeter the password and Enter) as a desktop user (default test/test): sets the password, picks " +
    "the session through AccountsService and ~/.dmrc when asked (auto = the display manager's default; gnome, plasma, " +
    "mate or xfce), waits until the greeter is drawn, types the password and waits until the session's desktop is " +
    "drawn. Answers the session process and a screenshot.",
  params: {
    user: { description: "desktop user", default: "test" },
    password: { description: "password to set and type", default: "test" },
    session: { description: "auto (display manager default), gnome, plasma, mate or xfce", default: "auto" },
  },
  run(vm, p) {
    if (p.session !== "auto" && !sessions[p.session]) {
      throw new Error(`unknown session ${p.session}: use auto, ${Object.keys(sessions).join(", ")}`);
    }
    vm.expect(`id -u ${p.user}`);
    if (p.session !== "auto") {
      // A session that is not installed would be asked of AccountsService and silently replaced by the default.
      const have = vm.check("ls /usr/share/xsessions /usr/share/wayland-sessions 2>/dev/null | sed -n 's/[.]desktop$//p'");
      const names = (have || "").split("\n").filter((n) => n);
      if (names.length > 0 && !names.includes(sessions[p.session].desktop)) {
        throw new PoligonError(
          "login",
          `session ${p.session} is not installed on this guest (its sessions: ${names.join(", ")})`,
          `pass session=auto (the display manager's default)${names.filter((n) => sessions[n]).map((n) => ` or session=${n}`).join("")}`,
        );
      }
    }
    // chpasswd reads user:password from stdin; the password never lands on a command line of the guest's ps.
    vm.expect(`printf '%s:%s\\n' '${p.user}' '${p.password.replace(/'/g, "'\\''")}' | chpasswd`);
    if (p.session !== "auto") {
      const s = sessions[p.session];
      vm.expect(
        `f=/var/lib/AccountsService/users/${p.user}; mkdir -p "$(dirname "$f")"; ` +
          `{ grep -v -e '^Session=' -e '^XSession=' -e '^\\[User\\]' "$f" 2>/dev/null; } > "$f.new"; ` +
          `{ echo '[User]'; echo 'Session=${s.desktop}'; echo 'XSession=${s.desktop}'; cat "$f.new"; } > "$f"; rm -f "$f.new"; chmod 600 "$f"`,
      );
      // Without AccountsService (Debian's lightdm does not pull it in) lightdm takes the session from ~/.dmrc.
      vm.expect(
        `h=$(getent passwd ${p.user} | cut -d: -f6); printf '[Desktop]\nSession=${s.desktop}\n' > "$h/.dmrc"; ` +
          `chown ${p.user}: "$h/.dmrc"; chmod 644 "$h/.dmrc"`,
      );
    }
    if (p.session === "auto" && vm.check(`pgrep -u ${p.user} -x '${anySession}' >/dev/null`) !== null) {
      vm.log(`${p.user} is logged in already`);
    } else {
      // Until the greeter runs, the screen can be a text console (tty1's login prompt, text OCR reads too).
      const greeter =
        "pgrep -x 'lightdm-gtk-gre|lightdm-kde-gre|slick-greeter|sddm-greeter' >/dev/null || pgrep -u gdm,Debian-gdm -x gnome-shell >/dev/null";
      if (vm.check(`for i in $(seq 120); do { ${greeter}; } && exit 0; sleep 1; done; exit 1`, { timeout: 130 }) === null) {
        vm.log("warning: no greeter process known to this script after 120 s: going on with what the screen shows");
      }
      waitDrawn(vm, "greeter", 2);
      // lightdm's GTK greeter opens on the password of the selected user (the user list is a combo box): an Enter
      // there would submit an empty password, and the delay after the failure swallows what is typed next. Without
      // its user list it opens on a name entry. GDM and lightdm-kde open on the user list: Enter selects the first.
      if (vm.check("pgrep -x lightdm-gtk-gre >/dev/null") !== null) {
        if (vm.check("lightdm --show-config 2>&1 | grep -q 'greeter-hide-users=true'") !== null) {
          vm.keyboard.type(p.user);
          vm.keyboard.press("ret");
          vm.screen.waitStill({ seconds: 1, timeout: 15 });
        }
      } else {
        vm.keyboard.press("ret");
        vm.screen.waitStill({ seconds: 1, timeout: 15 });
      }
      vm.keyboard.type(p.password);
      vm.keyboard.press("ret");
    }
    const want = p.session === "auto" ? anySession : sessions[p.session].process;
    const started = vm.check(`for i in $(seq 60); do pgrep -u ${p.user} -x '${want}' && exit 0; sleep 1; done; exit 1`, { timeout: 75 });
    if (started === null) {
      throw new Error(`no ${want} of ${p.user} after 60 s: the login did not go through (wrong password, or another greeter?)`);
    }
    const proc = vm.expect(`ps -o comm= -p ${started.trim().split("\n")[0]}`).trim();
    const s = Object.values(sessions).find((s) => s.process === proc);
    if (s && s.ready !== s.process) {
      // XFCE's session manager runs some 15-30 s (under TCG) before its panel and desktop are drawn.
      if (vm.check(`for i in $(seq 90); do pgrep -u ${p.user} -x '${s.ready}' >/dev/null && exit 0; sleep 1; done; exit 1`, { timeout: 100 }) === null) {
        vm.log(`warning: ${proc} runs but no ${s.ready} after 90 s: the desktop may not be drawn`);
      }
    }
    waitDrawn(vm, "desktop", 3);
    vm.screen.shot();
    return `${p.user} logged in: ${proc}`;
  },
};
