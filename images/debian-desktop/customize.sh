#!/usr/bin/env bash
# The debian-desktop template's last customize step, run by images/debian/customize.sh with the root directory as $1
# after the server template's own configuration and boot loader.
set -euo pipefail
root=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
in_root() { chroot "$root" "$@"; }

cp -R "$HERE/rootfs/." "$root/"

# Locales: English (the default) and Russian, for the eyes' two languages.
printf '%s\n' 'en_US.UTF-8 UTF-8' 'ru_RU.UTF-8 UTF-8' >"$root/etc/locale.gen"
in_root locale-gen >/dev/null
echo 'LANG=en_US.UTF-8' >"$root/etc/default/locale"

# The greeter at boot; no autologin: logging in is vm_login's job (the test user's password is "test", test-only).
in_root systemctl enable --quiet lightdm
in_root systemctl set-default --quiet graphical.target

# XFCE's first start would ask which panel layout to use (a dialog over the desktop): the default layout is made
# the system's panel configuration, so every new user gets it without a question.
xdg=$root/etc/xdg/xfce4
mkdir -p "$xdg/xfconf/xfce-perchannel-xml"
cp "$xdg/panel/default.xml" "$xdg/xfconf/xfce-perchannel-xml/xfce4-panel.xml"
# The GTK test application must run here, not only be copied: a missing typelib shows now, not in a test.
in_root python3 -c 'import gi; gi.require_version("Gtk", "3.0"); gi.require_version("Atspi", "2.0"); from gi.repository import Gtk, Atspi' ||
	{ echo "customize: error: the GTK test application's libraries do not import" >&2; exit 1; }
