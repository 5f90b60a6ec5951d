// Stand nasty: compiled from its plan by poligon (`poligon stand compile plan.json`). Edit the plan, not this file.
// Notes: Strings that try to break out:
//   */ </script> `backticks` ${x}
//   // and a comment
//   that ends early
/// <reference path="poligon.d.ts" />

const stand = "nasty";

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
    /* 1 */ ["exec echo `id` ${HOME} $(whoami) \\ \"quoted\" 'single'", (vm, p) => vm.exec("echo `id` ${HOME} $(whoami) \\ \"quoted\" 'single'", { timeout: 120 })],
    /* 2 */ ["exec printf '%s\\n' \"${x}\" ` + {{vmid}} + ` </script><script>alert(1)</script>", (vm, p) => vm.exec(`printf '%s\\n' "\${x}" \` + ${vm.vmid} + \` </script><script>alert(1)</script>`, { timeout: 120 })],
    /* 3 */ ["exec line1 line2 line3 line4 end nul [0m `", (vm, p) => vm.exec("line1\nline2\r\nline3\u2028line4\u2029end\u0000nul\u001b[0m\t`", { timeout: 120 })],
    /* 4 */ ["type <redacted 23 bytes>", (vm, p) => vm.keyboard.type("}); process.exit(1); ({")],
    /* 5 */ ["type <redacted 42 bytes>", (vm, p) => vm.keyboard.type(`\${${vm.vmid}}$$${vm.vmid}\\$${vm.vmid}\`$${vm.vmid}\``)],
  ],
  // ws: template kworkstation-11.4-x86_64-gnome, needs server
  ws: [
    /* 1 */ ["recipe login user=test password=<redacted 22 bytes> session=gnome", (vm, p) => vm.recipe("login", { user: "test", password: "s3cr`et${x}\"'</script>", session: "gnome" })],
    /* 2 */ ["expect curl -s 'http://{{ip.server}}/?q=${1}' # \\` (contains \"\\\"}]);//\")", (vm, p) => vm.expect(`curl -s 'http://${ip(p, "server")}/?q=\${1}' # \\\``, { timeout: 120, contains: "\"}]);//" })],
    /* 3 */ ["script gnome_login password=<redacted 21 bytes>", (vm, p) => vm.recipe("gnome_login", { password: `hunter2 ${ip(p, "server")}` })],
  ],
};

/** @type {poligon.Script} */
module.exports = {
  name: "stand_nasty",
  description: "Stand nasty: server (tiny), ws (kworkstation-11.4-x86_64-gnome), set up step by step from its plan. The builder runs it once per machine with role=<role>, from=<the first step to run> and ip_<role> for each earlier machine's address it uses.",
  tool: false,
  timeout: 1800,
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
