#!/usr/bin/env bash
# Builds the `debian-desktop` VM template: the `debian` template (images/debian) plus Xorg, XFCE 4.18 and lightdm
# with its GTK greeter, and registers it:
#
#   images/debian-desktop/build.sh [DATA_DIR]
#
#   $DATA/templates/debian-desktop.toml, $DATA/templates/debian-desktop/disk.qcow2, $DATA/cache/debian-desktop/
#
# The same recipe as debian's (one mmdebstrap run, the same boot loader and disk layout, the shared package cache)
# with more packages and customize.sh of this directory run last. Needs what debian's needs: root and the host
# packages mmdebstrap, e2fsprogs, fdisk, qemu-utils. Exits at once when nothing changed. README.md says what is in it.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

export NAME=debian-desktop VMID=9020 MEMORY_MB=2048 DISK_GB=8
export DESCRIPTION="the debian-desktop template: Debian 12 with XFCE 4.18, lightdm (GTK greeter), xfce4-terminal, DejaVu fonts, AT-SPI"
# No Recommends come with them (mmdebstrap's default): every package the desktop needs is named here.
export EXTRA_PACKAGES="xserver-xorg-core xserver-xorg-input-libinput xserver-xorg-video-fbdev xauth x11-xserver-utils
  x11-utils xdotool libpam-systemd dbus-user-session
  lightdm lightdm-gtk-greeter
  xfce4-session xfwm4 xfce4-panel xfdesktop4 xfce4-settings xfconf libxfce4ui-utils xfce4-terminal
  adwaita-icon-theme librsvg2-common fonts-dejavu-core fonts-dejavu-extra locales
  at-spi2-core python3-pyatspi gir1.2-atspi-2.0 python3-gi gir1.2-gtk-3.0"
export EXTRA_SOURCES="$HERE/build.sh:$HERE/customize.sh:$HERE/rootfs"
export CUSTOMIZE_MORE="$HERE/customize.sh"
exec "$HERE/../debian/build.sh" "$@"
