// Stand nginxws: compiled from its plan by poligon (`poligon stand compile plan.json`). Edit the plan, not this file.
// Notes: free text from the planner, never executed
/// <reference path="poligon.d.ts" />

const stand = "nginxws";

// ip answers the address of an earlier machine, which the builder passes as p.ip_<role>.
function ip(p, role) {
  const addr = p["ip_" + role];
  if (!addr) throw new Error(`stand ${stand}: the address of machine ${role} is not known (param ip_${role} is empty): the builder passes it once ${role} is up`);
  return addr;
}

// One list of steps per machine, in plan order: [label, run]. p.ip_<role> is the address of an earlier machine.
const steps = {
  // server: template p11-server-11.1-x86-64-legacy-ext4-textmode-server, needs nothing
  server: [
    /* 1 */ ["recipe install packages=nginx", (vm, p) => vm.recipe("install", { packages: "nginx" })],
    /* 2 */ ["recipe enable_service service=nginx", (vm, p) => vm.recipe("enable_service", { service: "nginx" })],
  ],
  // ws: template kworkstation-11.4-x86_64-gnome, needs server
  ws: [
    /* 1 */ ["expect curl -s http://{{ip.server}}/ (contains \"html\")", (vm, p) => vm.expect(`curl -s http://${ip(p, "server")}/`, { timeout: 120, contains: "html" })],
    /* 2 */ ["recipe lightdm_login", (vm, p) => vm.recipe("lightdm_login")],
  ],
};

/** @type {poligon.Script} */
module.exports = {
  name: "stand_nginxws",
  description: "Stand nginxws: server (p11-server-11.1-x86-64-legacy-ext4-textmode-server), ws (kworkstation-11.4-x86_64-gnome), set up step by step from its plan. The builder runs it once per machine with role=<role>, from=<the first step to run> and ip_<role> for each earlier machine's address it uses.",
  tool: false,
  timeout: 1920,
  params: {
    role: { description: "the machine to set up: server, ws" },
    from: { description: "the step to start at (the builder resumes a stand with a later one)", default: "1" },
    ip_server: { description: "the address of machine server", default: "" },
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
