#!/bin/sh
# Installs the Debian packages poligon's local backend and its tests need,
# when any is missing: as root with apt-get, otherwise it prints the command.
#   tools/deps.sh [--check]      --check: only report, exit 1 when something is missing
set -eu
PACKAGES="qemu-system-x86 qemu-utils qemu-guest-agent busybox-static cpio tesseract-ocr tesseract-ocr-rus libtesseract-dev ovmf vde2 chromium"
missing=""
for p in $PACKAGES; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "${1:-}" = --check ]; then
	echo "missing Debian packages:$missing" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "poligon needs these Debian packages:$missing" >&2
	echo "install them with:  sudo apt-get update && sudo apt-get install -y$missing" >&2
	exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q $missing
