// vm_login: log into the graphical session through the display manager.
/// <reference path="../stdlib/poligon.d.ts" />

// The process that proves each session is up, and its AccountsService name.
const sessions = {
  gnome: { process: "gnome-shell", desktop: "gnome" },
  plasma: { process: "plasmashell", desktop: "plasma" },
  mate: { process: "mate-session", desktop: "mate" },
  xfce: { process: "xfce4-session", desktop: "xfce" },
};

// Any of these running means a desktop session is up (session=auto).
const anySession = "gnome-shell|plasmashell|mate-session|xfce4-session|cinnamon-session|lxqt-session";

/** @type {poligon.Script} */
module.exports = {
  name: "login",
  description:
    "Log into the graphical session through the display manager (GDM or lightdm, both take Enter, password, Enter) " +
    "as a desktop user (default test/test): sets the password, picks the session through AccountsService when asked " +
    "(auto = the display manager's default; gnome, plasma, mate or xfce), types the password at the greeter and waits " +
    "until the session's shell runs. Answers the session process and a screenshot.",
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
    // chpasswd reads user:password from stdin; the password never lands on a command line of the guest's ps.
    vm.expect(`printf '%s:%s\\n' '${p.user}' '${p.password.replace(/'/g, "'\\''")}' | chpasswd`);
    if (p.session !== "auto") {
      const s = sessions[p.session];
      vm.expect(
        `f=/var/lib/AccountsService/users/${p.user}; mkdir -p "$(dirname "$f")"; ` +
          `{ grep -v -e '^Session=' -e '^XSession=' -e '^\\[User\\]' "$f" 2>/dev/null; } > "$f.new"; ` +
          `{ echo '[User]'; echo 'Session=${s.desktop}'; echo 'XSession=${s.desktop}'; cat "$f.new"; } > "$f"; rm -f "$f.new"; chmod 600 "$f"`,
      );
    }
    if (p.session === "auto" && vm.check(`pgrep -u ${p.user} -x '${anySession}' >/dev/null`) !== null) {
      vm.log(`${p.user} is logged in already`);
    } else {
      // The greeter: Enter selects the (first) user, then the password.
      vm.screen.waitStill({ seconds: 2, timeout: 60 });
      vm.keyboard.press("ret");
      vm.screen.waitStill({ seconds: 1, timeout: 15 });
      vm.keyboard.type(p.password);
      vm.keyboard.press("ret");
    }
    const want = p.session === "auto" ? anySession : sessions[p.session].process;
    const started = vm.check(`for i in $(seq 60); do pgrep -u ${p.user} -x '${want}' && exit 0; sleep 1; done; exit 1`, { timeout: 75 });
    if (started === null) {
      throw new Error(`no ${want} of ${p.user} after 60 s: the login did not go through (wrong password, or another greeter?)`);
    }
    vm.screen.waitStill({ seconds: 2, timeout: 30 });
    const proc = vm.expect(`ps -o comm= -p ${started.trim().split("\n")[0]}`).trim();
    vm.screen.shot();
    return `${p.user} logged in: ${proc}`;
  },
};
