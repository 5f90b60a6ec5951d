// vm_install: install packages with apt-get, detached, picking up a run in progress.
/// <reference path="../stdlib/poligon.d.ts" />

const text = require("poligon/text");

/** @type {poligon.Script} */
module.exports = {
  name: "install",
  description:
    "Install packages with apt-get inside the VM and report their versions (rpm -q, or dpkg-query on Debian). " +
    "apt-get runs in the background and the call waits up to 40 s for it: on \"still installing\" call vm_install " +
    "again with the same packages to keep waiting (a finished run of the same packages is not repeated, different " +
    "packages start a new one).",
  params: {
    packages: { description: "space-separated package names" },
  },
  timeout: 120,
  run(vm, p) {
    const pkgs = p.packages.trim().split(/\s+/).filter((s) => s !== "");
    if (pkgs.length === 0) throw new Error("packages is empty");
    for (const name of pkgs) {
      if (!/^[A-Za-z0-9][A-Za-z0-9.+_:-]*$/.test(name)) throw new Error(`${JSON.stringify(name)} is not a package name`);
    }
    if (vm.waitBoot({ timeout: 60 }) === null) throw new Error("the guest agent did not answer within 60 s");
    const list = pkgs.join(" ");
    const st = vm.run(`export DEBIAN_FRONTEND=noninteractive; apt-get update -q && apt-get install -y ${list}`, { wait: 40 });
    if (st.state === "running") {
      return `still installing after ${st.seconds} s: call vm_install again with the same packages to keep waiting\n${st.tail}`;
    }
    if (st.state === "failed") {
      throw new Error(`apt-get failed (exit ${st.exit}):\n${st.tail}`);
    }
    const versions = vm.expect(
      `if command -v rpm >/dev/null && rpm -q ${list} >/dev/null 2>&1; then rpm -q ${list}; ` +
        `else dpkg-query -W -f='\${Package}-\${Version}.\${Architecture}\\n' ${list}; fi`,
    );
    return text.lines(versions).join("\n");
  },
};
