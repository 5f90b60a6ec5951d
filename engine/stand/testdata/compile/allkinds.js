// Stand allkinds: compiled from its plan by poligon (`poligon stand compile plan.json`). Edit the plan, not this file.
/// <reference path="poligon.d.ts" />

const stand = "allkinds";

// ip answers the address of an earlier machine, which the builder passes as p.ip_<role>.
function ip(p, role) {
  const addr = p["ip_" + role];
  if (!addr) throw new Error(`stand ${stand}: the address of machine ${role} is not known (param ip_${role} is empty): the builder passes it once ${role} is up`);
  return addr;
}

// One list of steps per machine, in plan order: [label, run]. p.ip_<role> is the address of an earlier machine.
const steps = {
  // base: template tiny, needs nothing
  base: [
    /* 1 */ ["exec hostname {{role}}", (vm, p) => vm.exec("hostname base", { timeout: 120 })],
  ],
  // desk: template kworkstation-11.4-x86_64-gnome, needs base
  desk: [
    /* 1 */ ["exec uname -a", (vm, p) => vm.exec("uname -a", { timeout: 120 })],
    /* 2 */ ["exec ping -c1 {{ip.base}}", (vm, p) => vm.exec(`ping -c1 ${ip(p, "base")}`, { timeout: 15 })],
    /* 3 */ ["exec_gui kcalc", (vm, p) => vm.execGui("kcalc", { user: "test" })],
    /* 4 */ ["exec_gui xterm -T vm{{vmid}} (as admin)", (vm, p) => vm.execGui(`xterm -T vm${vm.vmid}`, { user: "admin" })],
    /* 5 */ ["expect pgrep kcalc", (vm, p) => vm.expect("pgrep kcalc", { timeout: 120 })],
    /* 6 */ ["expect cat /etc/hostname (contains \"{{role}}\")", (vm, p) => vm.expect("cat /etc/hostname", { timeout: 5.5, contains: "desk" })],
    /* 7 */ ["wait_boot 90", (vm, p) => { if (vm.waitBoot({ timeout: 90 }) === null) throw new Error("the guest agent did not answer within 90 s"); }],
    /* 8 */ ["sleep 2.5", (vm, p) => vm.sleep(2.5)],
    /* 9 */ ["screenshot", (vm, p) => vm.screen.shot()],
    /* 10 */ ["screenshot shots/{{stand}}-{{role}}-{{vmid}}.png", (vm, p) => vm.evidence.save(`shots/allkinds-desk-${vm.vmid}.png`)],
    /* 11 */ ["click 10,20", (vm, p) => vm.mouse.click(10, 20, { button: "left", count: 1 })],
    /* 12 */ ["click 100,200 right x2", (vm, p) => vm.mouse.click(100, 200, { button: "right", count: 2 })],
    /* 13 */ ["click_label \"OK\"", (vm, p) => vm.mouse.clickLabel("OK", { button: "left", count: 1 })],
    /* 14 */ ["click_label \"Trash\" (icon) middle x3", (vm, p) => vm.mouse.clickLabel("Trash", { kind: "icon", button: "middle", count: 3 })],
    /* 15 */ ["drag 1,2 -> 300,400", (vm, p) => vm.mouse.drag(1, 2, 300, 400)],
    /* 16 */ ["type <redacted 12 bytes>", (vm, p) => vm.keyboard.type("hello world\n")],
    /* 17 */ ["key ctrl-alt-f2", (vm, p) => vm.keyboard.press("ctrl-alt-f2")],
    /* 18 */ ["snapshot before-{{role}}", (vm, p) => vm.power.snapshot("before-desk")],
    /* 19 */ ["rollback before-{{role}}", (vm, p) => vm.power.rollback("before-desk")],
    /* 20 */ ["recipe update", (vm, p) => vm.recipe("update")],
    /* 21 */ ["recipe login user=test session=plasma", (vm, p) => vm.recipe("login", { user: "test", session: "plasma" })],
    /* 22 */ ["script install packages=kcalc", (vm, p) => vm.recipe("install", { packages: "kcalc" })],
    /* 23 */ ["script gnome_login", (vm, p) => vm.recipe("gnome_login")],
  ],
};

/** @type {poligon.Script} */
module.exports = {
  name: "stand_allkinds",
  description: "Stand allkinds: base (tiny), desk (kworkstation-11.4-x86_64-gnome), set up step by step from its plan. The builder runs it once per machine with role=<role>, from=<the first step to run> and ip_<role> for each earlier machine's address it uses.",
  tool: false,
  timeout: 6653,
  params: {
    role: { description: "the machine to set up: base, desk" },
    from: { description: "the step to start at (the builder resumes a stand with a later one)", default: "1" },
    ip_base: { description: "the address of machine base", default: "" },
  },
  run(vm, p) {
    if (!Object.prototype.hasOwnProperty.call(steps, p.role)) {
      throw new Error(`stand ${stand} has no machine ${JSON.stringify(p.role)} (roles: ${Object.keys(steps).join(", ")})`);
    }
    const list = steps[p.role];
    const from = Number(p.from);
    if (!Number.isInteger(from) || from < 1 || from > list.length + 1) {
      throw new Error(`from must be a step number from 1 to ${list.length + 1}, not ${JSON.stringify(p.from)}`);
    }
    for (let i = from; i <= list.length; i++) {
      vm.step(i, list.length, list[i - 1][0]);
      list[i - 1][1](vm, p);
    }
    return `${p.role}: ${list.length} steps`;
  },
};
