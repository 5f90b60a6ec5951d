// recipe update_branch: switch an ALT system to another repository branch, then update.
/// <reference path="../stdlib/poligon.d.ts" />

/** @type {poligon.Script} */
module.exports = {
  name: "update_branch",
  description:
    "apt-repo rm all && apt-repo add branch <branch>, a tolerated dist-upgrade pass (the p10->p11 usrmerge migration " +
    "exits 100), then the update recipe (dist-upgrade, update-kernel, reboot).",
  params: {
    branch: { description: "the ALT branch, e.g. p11 or sisyphus" },
  },
  tool: false,
  timeout: 3600,
  run(vm, p) {
    if (!/^[a-z0-9]+$/.test(p.branch)) throw new Error(`${JSON.stringify(p.branch)} is not a branch name`);
    vm.expect(`apt-repo rm all && apt-repo add branch ${p.branch} && apt-repo`, { contains: p.branch });
    const cmd = "export DEBIAN_FRONTEND=noninteractive; apt-get update && apt-get dist-upgrade -y";
    let st = vm.run(cmd, { wait: 50 });
    while (st.state === "running") st = vm.run(cmd, { wait: 50 });
    if (st.state === "failed" && st.exit !== 100) throw new Error(`the branch upgrade failed (exit ${st.exit}):\n${st.tail}`);
    return vm.recipe("update", {});
  },
};
