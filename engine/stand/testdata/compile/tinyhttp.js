// Stand tinyhttp: compiled from its plan by poligon (`poligon stand compile plan.json`). Edit the plan, not this file.
// Notes: Two tiny machines: busybox httpd on one, wget from the other.
/// <reference path="poligon.d.ts" />

const stand = "tinyhttp";

// ip answers the address of an earlier machine, which the builder passes as p.ip_<role>.
function ip(p, role) {
  const addr = p["ip_" + role];
  if (!addr) throw new Error(`stand ${stand}: the address of machine ${role} is not known (param ip_${role} is empty): the builder passes it once ${role} is up`);
  return addr;
}

// One list of steps per machine, in plan order: [label, run]. p.ip_<role> is the address of an earlier machine.
const steps = {
  // server: template tiny, needs nothing
  server: [
    /* 1 */ ["exec mkdir -p /srv/www && echo hello-from-{{stand}} > /srv/www/index.html", (vm, p) => vm.exec("mkdir -p /srv/www && echo hello-from-tinyhttp > /srv/www/index.html", { timeout: 120 })],
    /* 2 */ ["exec busybox httpd -p 80 -h /srv/www", (vm, p) => vm.exec("busybox httpd -p 80 -h /srv/www", { timeout: 10 })],
    /* 3 */ ["expect busybox wget -q -O - http://127.0.0.1/ (contains \"hello\")", (vm, p) => vm.expect("busybox wget -q -O - http://127.0.0.1/", { timeout: 120, contains: "hello" })],
  ],
  // client: template tiny, needs server
  client: [
    /* 1 */ ["wait_boot 60", (vm, p) => { if (vm.waitBoot({ timeout: 60 }) === null) throw new Error("the guest agent did not answer within 60 s"); }],
    /* 2 */ ["expect busybox wget -q -O - http://{{ip.server}}/ (contains \"hello-from-tinyhttp\")", (vm, p) => vm.expect(`busybox wget -q -O - http://${ip(p, "server")}/`, { timeout: 30, contains: "hello-from-tinyhttp" })],
  ],
};

/** @type {poligon.Script} */
module.exports = {
  name: "stand_tinyhttp",
  description: "Stand tinyhttp: server (tiny), client (tiny), set up step by step from its plan. The builder runs it once per machine with role=<role>, from=<the first step to run> and ip_<role> for each earlier machine's address it uses.",
  tool: false,
  timeout: 600,
  params: {
    role: { description: "the machine to set up: server, client" },
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
