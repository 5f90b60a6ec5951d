#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds the `tiny-x` VM template: the tiny template plus a small X11 desktop on the VGA screen (Xorg with the
# modesetting driver on bochs-drm, twm, an xterm, xdotool, xwininfo; Unicode misc-fixed fonts and the C.UTF-8
# locale, so xterm shows Cyrillic), for click, window and OCR tests. Registers it:
#
#   images/tiny-x/build.sh [DATA_DIR]
#   DATA_DIR defaults to ${POLIGON_DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/poligon}
#
#   $DATA/templates/tiny-x.toml, $DATA/templates/tiny-x/{vmlinuz,initrd.img}
#   $DATA/cache/tiny-x/                 the unpacked kernel parts, the build stamp (the .debs are shared with
#                                       tiny in $DATA/cache/tiny/debs)
#
# Everything comes from Debian 12 packages fetched with `apt-get download` (see images/tiny/lib.sh, which also
# lists the host packages it needs). The X libraries come from their packages unless the host has them all.
# Exits at once when nothing changed.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TINY=$(cd "$HERE/../tiny" && pwd)
# shellcheck source=../tiny/lib.sh
. "$TINY/lib.sh"

NAME=tiny-x
VMID=9001
DESCRIPTION="the tiny-x template: the tiny template plus Xorg (modesetting on bochs-drm), twm, xterm, xdotool, xwininfo"
# bochs: the DRM driver for -vga std; uhci_hcd + usbhid + hid_generic: the usb-tablet (absolute pointer).
MODULES="$BASE_MODULES bochs uhci_hcd usbhid hid_generic"
CMDLINE="console=tty1 console=ttyS0 quiet"
MEMORY_MB=256
INIT=$TINY/init
OVERLAYS=("$TINY/rootfs" "$HERE/rootfs")
SOURCES=("$HERE/build.sh" "$TINY/lib.sh" "$TINY/init" "$TINY/rootfs" "$HERE/rootfs")

PACKAGES="xserver-xorg-core xserver-xorg-input-evdev x11-xkb-utils xkb-data libx11-data twm xterm xdotool x11-utils"
# For text beyond Latin-1 (Cyrillic in OCR tests): fonts from xfonts-base, the C.UTF-8 locale from libc-bin.
PACKAGES="$PACKAGES xfonts-base libc-bin"
# Only what the desktop needs: no GLX/glamor (they would pull in Mesa and LLVM). Of the fonts, five ISO10646-1
# misc-fixed ones for xterm and 6x13-ISO8859-5 for twm's Cyrillic titles (rootfs/usr/share/fonts/X11/misc/fonts.dir
# lists exactly these; /sbin/xorg-conf puts them before the X server's built-ins, which keep the cursor font); of
# libc-bin only the locale.
COPY="/usr/lib/xorg/Xorg
/usr/lib/xorg/modules/drivers/modesetting_drv.so
/usr/lib/xorg/modules/input/evdev_drv.so
/usr/lib/xorg/modules/libshadow.so
/usr/lib/xorg/modules/libshadowfb.so
/usr/bin/xkbcomp
/usr/share/X11/xkb
/usr/share/X11/locale
/usr/share/X11/XErrorDB
/usr/bin/twm
/usr/bin/xterm
/etc/X11/app-defaults/XTerm
/usr/bin/xdotool
/usr/bin/xwininfo
/usr/share/fonts/X11/misc/6x13.pcf.gz
/usr/share/fonts/X11/misc/6x13B.pcf.gz
/usr/share/fonts/X11/misc/9x15.pcf.gz
/usr/share/fonts/X11/misc/9x15B.pcf.gz
/usr/share/fonts/X11/misc/10x20.pcf.gz
/usr/share/fonts/X11/misc/6x13-ISO8859-5.pcf.gz
/usr/lib/locale/C.utf8"

template_main "$@"
