// vm_dataset_app: launch an application in the desktop session and take its first shots, labelled for the
// training dataset.
/// <reference path="../stdlib/poligon.d.ts" />

// A locale as LANG takes it: ru, ru_RU, ru_RU.UTF-8, sr_RS@latin.
const localeName = /^[a-z]{2,3}(_[A-Z]{2})?([.][A-Za-z0-9-]+)?(@[A-Za-z0-9]+)?$/;

// GTK's theme variable for each theme label (GTK 3 reads GTK_THEME; Qt and others ignore it, so the label then
// names what the caller set up some other way).
const gtkThemes = { light: "Adwaita", dark: "Adwaita:dark" };

// quote makes one shell word of s.
function quote(s) {
  return "'" + s.replace(/'/g, "'\\''") + "'";
}

/** @type {poligon.Script} */
module.exports = {
  name: "dataset_app",
  description:
    "Launch an application in the desktop session and take its first shots for the training dataset, labelled with " +
    "app, locale, theme and intent (empty ones: the guest's probes). Answers where its window is, and the last shot.",
  params: {
    app: { description: "its name in the dataset; the program too, unless command is given" },
    command: { description: "the command line (default: app)", default: "" },
    locale: { description: "e.g. ru_RU.UTF-8 (LANG, LC_ALL)", default: "" },
    theme: { description: "light or dark (GTK_THEME)", default: "" },
    intent: { description: "what the shots are for", default: "the first screen" },
    window: { description: "part of its window's title or class (default: app)", default: "" },
    user: { default: "test" },
    shots: { description: "1 to 10, 2 s apart", default: "2" },
  },
  timeout: 300,
  run(vm, p) {
    const app = p.app.trim();
    const command = p.command.trim() || app;
    if (app === "") throw new PoligonError("dataset_app", "app is empty", "pass the application, e.g. app=gnome-calculator");
    if (p.locale !== "" && !localeName.test(p.locale)) {
      throw new PoligonError("dataset_app", `locale ${JSON.stringify(p.locale)} is not a locale name`, "e.g. ru_RU.UTF-8, en_US.UTF-8 or ru");
    }
    if (p.theme !== "" && !gtkThemes[p.theme]) {
      throw new PoligonError("dataset_app", `theme ${JSON.stringify(p.theme)} is neither light nor dark`, "pass theme=light or theme=dark, or leave it out");
    }
    const shots = Number(p.shots);
    if (!Number.isInteger(shots) || shots < 1 || shots > 10) {
      throw new PoligonError("dataset_app", `shots ${JSON.stringify(p.shots)} is not a whole number from 1 to 10`, "e.g. shots=2");
    }
    const env = [];
    if (p.locale !== "") {
      const lang = p.locale.includes(".") || !p.locale.includes("_") ? p.locale : p.locale + ".UTF-8";
      env.push(`LANG=${quote(lang)}`, `LC_ALL=${quote(lang)}`, `LANGUAGE=${quote(p.locale.split(/[_.@]/)[0])}`);
    }
    if (p.theme !== "") env.push(`GTK_THEME=${quote(gtkThemes[p.theme])}`);
    const line = env.length > 0 ? `env ${env.join(" ")} ${command}` : command;

    vm.step(1, 3, `launch ${app}`);
    const launched = vm.execGui(line, { user: p.user });
    if (!launched.running) {
      throw new PoligonError("dataset_app", `${app} exited within 2 s: ${launched.output.trim() || "(no output)"}`,
        "check the command in a terminal of the session (vm_exec_gui), and that the user is logged in (vm_login)");
    }
    vm.step(2, 3, `wait for the window of ${app}`);
    const window = p.window || app;
    const box = vm.screen.waitWindow(window, { timeout: 60, user: p.user });
    if (box === null) {
      throw new PoligonError("dataset_app", `no window matching ${JSON.stringify(window)} showed within 60 s`,
        "pass window= with part of the window's title or class (ui_wait_for lists the windows of a session)");
    }
    vm.step(3, 3, `${shots} shots of ${app}`);
    let shot;
    for (let i = 0; i < shots; i++) {
      if (i > 0) vm.sleep(2);
      vm.screen.waitStill({ seconds: 1, timeout: 20 });
      shot = vm.screen.shot();
    }
    return `${app}: window ${JSON.stringify(window)} at ${box.x},${box.y} ${box.w}x${box.h}, ${shots} shots (last: ${shot.width}x${shot.height})`;
  },
};
