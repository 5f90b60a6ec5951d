// vm_gnome_login: vm_login with session=gnome.
/// <reference path="../stdlib/poligon.d.ts" />

/** @type {poligon.Script} */
module.exports = {
  name: "gnome_login",
  description:
    "Log into the GNOME session through the GDM greeter as a desktop user (default test/test): vm_login with session=gnome.",
  params: {
    user: { description: "desktop user", default: "test" },
    password: { description: "password to set and type", default: "test" },
  },
  run(vm, p) {
    return vm.recipe("login", { user: p.user, password: p.password, session: "gnome" });
  },
};
