// vm_lightdm_login: vm_login with session=plasma.
/// <reference path="../stdlib/poligon.d.ts" />

/** @type {poligon.Script} */
module.exports = {
  name: "lightdm_login",
  description:
    "Log into the Plasma session through the lightdm greeter (lightdm-kde; ALT's KDE Workstation uses lightdm, " +
    "not SDDM) as a desktop user (default test/test): vm_login with session=plasma. Another lightdm desktop (the " +
    "debian-desktop template's XFCE) takes session=xfce or auto.",
  params: {
    user: { description: "desktop user", default: "test" },
    password: { description: "password to set and type", default: "test" },
    session: { description: "plasma, xfce, mate, gnome or auto (the display manager's default)", default: "plasma" },
  },
  run(vm, p) {
    return vm.recipe("login", { user: p.user, password: p.password, session: p.session });
  },
};
