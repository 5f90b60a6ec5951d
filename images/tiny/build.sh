#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Builds the `tiny` VM template (Debian kernel + busybox initramfs with qemu-ga) and registers it:
#
#   images/tiny/build.sh [DATA_DIR]
#   DATA_DIR defaults to ${POLIGON_DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/poligon}
#
#   $DATA/templates/tiny.toml          the description the driver reads
#   $DATA/templates/tiny/vmlinuz       the Debian kernel (the newest linux-image-6.1.0-N-amd64 apt knows)
#   $DATA/templates/tiny/initrd.img    busybox-static, qemu-guest-agent, its libraries, the virtio modules
#   $DATA/cache/tiny/                  downloaded .debs, the unpacked kernel parts, the build stamp
#
# Everything comes from Debian 12 packages fetched with `apt-get download`; lib.sh says how, and which host
# packages it needs (bash, coreutils, findutils, grep, sed, mawk, gzip, apt, dpkg, libc-bin; util-linux optional).
# Exits at once when nothing changed.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

NAME=tiny
VMID=9000
DESCRIPTION="the tiny template: Debian kernel + busybox initramfs with qemu-ga"
MODULES=$BASE_MODULES
# /dev/console is the last console= (ttyS0): daemons' messages go to the serial log, not onto the VGA screen.
CMDLINE="console=tty1 console=ttyS0 quiet"
# 80 MiB panics (out of memory before /init), 96 boots with ~16 MiB left, 128 leaves ~50 MiB for commands.
MEMORY_MB=128
INIT=$HERE/init
OVERLAYS=("$HERE/rootfs")
SOURCES=("$HERE/build.sh" "$HERE/lib.sh" "$HERE/init" "$HERE/rootfs")

template_main "$@"
