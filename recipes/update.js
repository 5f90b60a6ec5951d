// recipe update: dist-upgrade (and update-kernel on ALT), reboot, and prove the reboot happened.
/// <reference path="../stdlib/poligon.d.ts" />

/** @type {poligon.Script} */
module.exports = {
  name: "update",
  description:
    "apt-get update && apt-get dist-upgrade -y (and update-kernel -y where it exists), reboot, wait for the guest " +
    "agent (240 s), then assert the reboot really happened: a marker in /run (a tmpfs) made before it must be gone.",
  params: {},
  tool: false,
  timeout: 3600,
  run(vm) {
    const cmd =
      // A changed conffile would stop dpkg at a question no one reads (its stdin is the agent's /dev/null):
      // keep the local file, take the package's where the file is untouched.
      "export DEBIAN_FRONTEND=noninteractive; apt-get update && " +
      "apt-get -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold dist-upgrade -y && " +
      "if command -v update-kernel >/dev/null; then update-kernel -y; fi";
    let st = vm.run(cmd, { wait: 50 });
    while (st.state === "running") st = vm.run(cmd, { wait: 50 });
    if (st.state === "failed") throw new Error(`the upgrade failed (exit ${st.exit}):\n${st.tail}`);
    vm.expect("touch /run/poligon-before-reboot");
    vm.exec("(sleep 2; reboot) >/dev/null 2>&1 &");
    // Wait until the marker is gone (the old system is down), then for the new one.
    vm.sleep(10);
    if (vm.waitBoot({ timeout: 240 }) === null) throw new Error("the guest agent did not come back within 240 s of the reboot");
    vm.expect("test ! -e /run/poligon-before-reboot");
    return vm.expect("uname -r").trim();
  },
};
