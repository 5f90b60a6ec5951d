// recipe enable_service: systemctl enable --now, then check it is active.
/// <reference path="../stdlib/poligon.d.ts" />

/** @type {poligon.Script} */
module.exports = {
  name: "enable_service",
  description: "Enable and start a systemd service (systemctl enable --now) and check that it is active.",
  params: {
    service: { description: "the unit, e.g. nginx or sshd.service" },
  },
  tool: false,
  run(vm, p) {
    if (!/^[A-Za-z0-9@._-]+$/.test(p.service)) throw new Error(`${JSON.stringify(p.service)} is not a unit name`);
    vm.expect(`systemctl enable --now ${p.service}`, { timeout: 120 });
    return vm.expect(`systemctl is-active ${p.service}`, { contains: "active" }).trim();
  },
};
