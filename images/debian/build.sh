#!/usr/bin/env bash
# Builds the `debian` VM template (Debian 12 installed on a partitioned qcow2 disk with GRUB for BIOS and UEFI)
# and registers it:
#
#   images/debian/build.sh [DATA_DIR]
#   DATA_DIR defaults to ${POLIGON_DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/poligon}
#
#   $DATA/templates/debian.toml        the description the driver reads (firmware "bios")
#   $DATA/templates/debian/disk.qcow2  the installed system, compressed
#   $DATA/cache/debian/                the downloaded .debs, the build stamp
#
# Everything comes from Debian 12 packages through this machine's apt sources (which the guest keeps as its own).
# Needs root (mmdebstrap --mode=root runs dpkg in a chroot) and the host packages mmdebstrap, e2fsprogs, fdisk and
# qemu-utils; no loop devices, no mounts: the root filesystem is made with `mkfs.ext4 -d`, the ESP with the guest's
# own mtools, and GRUB (the guest's grub-pc-bin and grub-efi-amd64-bin) is written into the image file.
# Exits at once when nothing changed. images/debian/README.md says what is in it.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
export LC_ALL=C
umask 022
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

NAME=${NAME:-debian}
VMID=${VMID:-9010}
DESCRIPTION=${DESCRIPTION:-"the debian template: Debian 12 with systemd, qemu-guest-agent, ssh, nginx, postgresql"}
MEMORY_MB=${MEMORY_MB:-1024}
DISK_GB=${DISK_GB:-6}  # the virtual size; the qcow2 holds only what is written
SUITE=bookworm
# The packages of the server template; a variant (debian-desktop) adds its own in EXTRA_PACKAGES.
PACKAGES="linux-image-amd64 systemd-sysv systemd-resolved udev dbus qemu-guest-agent openssh-server sudo
  nginx postgresql curl ca-certificates cloud-guest-utils fdisk e2fsprogs iproute2 iputils-ping procps less
  grub-pc-bin grub-efi-amd64-bin mtools dosfstools ${EXTRA_PACKAGES:-}"
# A variant names its own recipe files in EXTRA_SOURCES (colon-separated, like PATH) so the stamp covers them.
SOURCES=("$HERE/build.sh" "$HERE/customize.sh" "$HERE/rootfs")
if [ -n "${EXTRA_SOURCES:-}" ]; then
	IFS=: read -ra extra <<<"$EXTRA_SOURCES"
	SOURCES+=("${extra[@]}")
fi

die() {
	printf '%s: error: %s\n' "$NAME" "$1" >&2
	[ -z "${2:-}" ] || printf 'hint: %s\n' "$2" >&2
	exit 1
}
log() { printf '%s: %s\n' "$NAME" "$*" >&2; }

DATA=${1:-${POLIGON_DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/poligon}}
mkdir -p "$DATA" && DATA=$(cd "$DATA" && pwd) || die "cannot use $DATA as the data directory"
TEMPLATES=$DATA/templates
CACHE=$DATA/cache/$NAME
DEBS=$DATA/cache/debian/debs # shared by debian and its variants
mkdir -p "$CACHE" "$DEBS" "$TEMPLATES"

# The host's apt sources, which the build uses and the guest keeps.
APT_SOURCES=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
	[ -s "$f" ] && grep -q '^[[:space:]]*[^#[:space:]]' "$f" && APT_SOURCES+=("$f")
done

# --- the stamp: the recipe's content, the package list and apt's view of the archive ---------------------------

source_hash() {
	{
		find "${SOURCES[@]}" \( -type f -o -type l \) -printf '%m %P %l\n' | sort
		find "${SOURCES[@]}" -type f -print0 | sort -z | xargs -0 sha256sum | cut -c1-64
		echo "$PACKAGES $VMID $MEMORY_MB $DISK_GB $DESCRIPTION"
		cat ${APT_SOURCES[@]+"${APT_SOURCES[@]}"}
		# The archive's state as apt last saw it: a new point release or security update changes these.
		cat /var/lib/apt/lists/*Release 2>/dev/null | grep -E '^(Date|Valid-Until):' || true
	} | sha256sum | cut -c1-64
}

stamp=$CACHE/stamp
outputs_present() { [ -f "$TEMPLATES/$NAME.toml" ] && [ -f "$TEMPLATES/$NAME/disk.qcow2" ]; }
key=$(source_hash)
if outputs_present && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
	exit 0
fi

[ "$(id -u)" = 0 ] || die "building the $NAME template needs root: mmdebstrap --mode=root installs the packages with dpkg in a chroot" \
	"run it as root (sudo poligon image $NAME); it uses no loop devices and no mounts, so an unprivileged container with root inside will do"
for c in mmdebstrap:mmdebstrap mkfs.ext4:e2fsprogs sfdisk:fdisk qemu-img:qemu-utils; do
	command -v "${c%%:*}" >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "${c%%:*}" >/dev/null ||
		die "${c%%:*} is not installed" "apt-get install -y mmdebstrap e2fsprogs fdisk qemu-utils"
done
export PATH=$PATH:/usr/sbin:/sbin
[ ${#APT_SOURCES[@]} -gt 0 ] || die "this machine has no apt sources" "the build takes Debian 12 (bookworm) packages from the host's /etc/apt/sources.list(.d)"

# One build at a time per template; a build that waited here may find the work already done.
exec 9>"$CACHE/lock"
flock 9
if outputs_present && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
	exit 0
fi
# Left by a build that was killed: mmdebstrap killed hard leaves /proc, /sys and /dev mounted in its root, and rm -rf
# would descend into them. Unmount those first, deepest first.
findmnt -rn -o TARGET 2>/dev/null | grep -F "$CACHE/work." | sort -r | while read -r m; do umount -l "$m" || true; done || true
rm -rf --one-file-system "$CACHE"/work.*
WORK=$(mktemp -d "$CACHE/work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root
start=$SECONDS

# The filesystems' UUIDs are fixed now so fstab and grub.cfg can name them.
ROOT_UUID=$(cat /proc/sys/kernel/random/uuid)
ESP_SERIAL=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ' | tr a-f A-F)
export ROOT_UUID ESP_SERIAL NAME HERE WORK

# --- 1. the root filesystem, with packages cached between builds --------------------------------------------------
# debian and its variants share $DEBS: one mmdebstrap at a time syncs it in and out.
exec 8>"$DEBS.lock"
flock 8
log "installing Debian 12 into $ROOT (mmdebstrap; the .debs are cached in $DEBS)"
# The whole log is kept in $CACHE/build.log; the terminal gets mmdebstrap's progress lines (I:, W:, E:).
set +e
# shellcheck disable=SC2086 # one package a word
mmdebstrap --mode=root --variant=apt --format=directory \
	--include="$(echo $PACKAGES | tr ' ' ,)" \
	--aptopt='Acquire::Retries "3"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--skip=download/empty --skip=essential/unlink \
	--setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
	--setup-hook="sync-in $DEBS /var/cache/apt/archives/" \
	--essential-hook="\"$HERE/customize.sh\" essential \"\$1\"" \
	--customize-hook="sync-out /var/cache/apt/archives $DEBS" \
	--customize-hook="\"$HERE/customize.sh\" customize \"\$1\"" \
	$SUITE "$ROOT" "${APT_SOURCES[@]}" </dev/null 2>&1 | tee "$CACHE/build.log" |
	{ grep --line-buffered -E '^(I|W|E): ' | sed -u "s/^/$NAME: /" >&2; true; }
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
	tail -n 20 "$CACHE/build.log" | sed "s/^/$NAME: /" >&2
	die "mmdebstrap failed (its log: $CACHE/build.log)" "check the apt sources (apt-get update) and that the packages download"
fi
# Old versions of the cached packages go.
find "$DEBS" -name '*.deb' -mtime +30 -delete 2>/dev/null || true
log "root filesystem $(du -sm "$ROOT" | cut -f1) MB after $((SECONDS - start)) s"

# --- 2. the disk: MBR, p1 = ESP (32 MiB FAT), p2 = root (ext4, to the end of the disk) --------------------------
ESP_START=2048 ESP_SECTORS=$((32 * 2048)) ROOT_START=$((2048 + 32 * 2048))
DISK=$WORK/disk.raw
truncate -s "${DISK_GB}G" "$DISK"
printf 'label: dos\n%s,%s,ef\n%s,,83,*\n' "$ESP_START" "$ESP_SECTORS" "$ROOT_START" | sfdisk -q "$DISK"
root_bytes=$(($(stat -c %s "$DISK") - ROOT_START * 512))

# The ESP, made with the guest's own tools (chroot: no host dosfstools or mtools needed).
chroot "$ROOT" mkfs.vfat -F 16 -n ESP -i "$ESP_SERIAL" -C /esp.img $((ESP_SECTORS / 2)) >/dev/null
chroot "$ROOT" mmd -i /esp.img ::/EFI ::/EFI/BOOT
chroot "$ROOT" mcopy -i /esp.img /BOOTX64.EFI ::/EFI/BOOT/BOOTX64.EFI
dd if="$ROOT/esp.img" of="$DISK" bs=512 seek="$ESP_START" conv=notrunc status=none
# GRUB for BIOS: boot.img's code into the MBR (keeping the partition table), core.img after it.
dd if="$ROOT/usr/lib/grub/i386-pc/boot.img" of="$DISK" bs=440 count=1 conv=notrunc status=none
[ "$(stat -c %s "$ROOT/core.img")" -le $(((ESP_START - 1) * 512)) ] || die "GRUB's core.img does not fit before the first partition"
dd if="$ROOT/core.img" of="$DISK" bs=512 seek=1 conv=notrunc status=none
rm -f "$ROOT/esp.img" "$ROOT/core.img" "$ROOT/BOOTX64.EFI"

truncate -s "$root_bytes" "$WORK/root.img"
mkfs.ext4 -q -F -L root -U "$ROOT_UUID" -d "$ROOT" -E root_owner=0:0 "$WORK/root.img"
rm -rf "$ROOT"
dd if="$WORK/root.img" of="$DISK" bs=1M seek=$((ROOT_START / 2048)) conv=notrunc,sparse status=none
rm -f "$WORK/root.img"
mkdir -p "$WORK/out"
qemu-img convert -c -O qcow2 "$DISK" "$WORK/out/disk.qcow2"
rm -f "$DISK"
log "disk ${DISK_GB} GiB virtual, $(du -m "$WORK/out/disk.qcow2" | cut -f1) MB compressed qcow2, after $((SECONDS - start)) s"

# --- 3. register: aside, then moved into place, the .toml last ---------------------------------------------------
stage=$TEMPLATES/.$NAME.new.$$ old=$TEMPLATES/.$NAME.old.$$ toml=$TEMPLATES/.$NAME.toml.new.$$
trap 'rm -rf "$WORK" "$stage" "$toml"' EXIT
mv "$WORK/out" "$stage"
cat >"$toml" <<EOF
# $DESCRIPTION
# built by images/$NAME/build.sh on $(date -u +%F) from Debian $SUITE ($(grep -h '^Version=' "$WORK/versions" 2>/dev/null | head -1 | cut -d= -f2))
name = "$NAME"
vmid = $VMID
disk = "$NAME/disk.qcow2"     # relative to the templates dir; clones are qcow2 overlays on it
memory_mb = $MEMORY_MB
cores = 1
firmware = "bios"            # the disk also boots with OVMF: a template with firmware = "uefi" may share it
EOF
if [ -e "$TEMPLATES/$NAME" ]; then
	mv "$TEMPLATES/$NAME" "$old"
fi
mv "$stage" "$TEMPLATES/$NAME"
mv -f "$toml" "$TEMPLATES/$NAME.toml"
rm -rf "$old"
echo "$key" >"$stamp"
log "template $NAME registered in $TEMPLATES after $((SECONDS - start)) s"
