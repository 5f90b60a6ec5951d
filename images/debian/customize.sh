#!/usr/bin/env bash
# The debian template's mmdebstrap hooks, run on the host with the root directory as $2:
#
#   customize.sh essential ROOT   after the Essential packages, before the rest (the kernel) are installed
#   customize.sh customize ROOT   after everything is installed: the system's configuration and the boot loader
#
# build.sh exports ROOT_UUID, ESP_SERIAL, NAME, HERE and WORK. A variant (debian-desktop) may set CUSTOMIZE_MORE to
# a script run last with ROOT as $1.
set -euo pipefail
phase=$1 root=$2
in_root() { chroot "$root" "$@"; }

essential() {
	# A small initramfs: the kernel's drivers for a virtio disk and ext4, not MODULES=most's 30 MB (its generation
	# and loading are a good part of a TCG boot). crc32c_generic: TCG's CPU has no SSE 4.2 for crc32c-intel.
	mkdir -p "$root/etc/initramfs-tools/conf.d" "$root/usr/share/initramfs-tools/modules.d"
	echo MODULES=list >"$root/etc/initramfs-tools/conf.d/poligon"
	printf '%s\n' virtio_pci virtio_blk virtio_scsi sd_mod ahci ext4 crc32c_generic \
		>"$root/usr/share/initramfs-tools/modules.d/poligon"
}

customize() {
	rm -f "$root"/var/cache/apt/archives/*.deb # copied out to the build's cache already
	cp -R "$HERE/rootfs/." "$root/"

	echo "$NAME" >"$root/etc/hostname"
	printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' "$NAME" >"$root/etc/hosts"
	echo 'LANG=C.UTF-8' >"$root/etc/default/locale"
	# The test user: password "test", for disposable test machines only; sudo with that password.
	in_root useradd --create-home --shell /bin/bash --groups sudo test
	echo 'test:test' | in_root chpasswd
	cat >"$root/etc/fstab" <<EOF
# <file system>  <mount point>  <type>  <options>  <dump>  <pass>
UUID=$ROOT_UUID  /  ext4  errors=remount-ro  0  1
UUID=${ESP_SERIAL:0:4}-${ESP_SERIAL:4:4}  /boot/efi  vfat  umask=0077,nofail  0  2
EOF
	mkdir -p "$root/boot/efi"

	in_root systemctl enable --quiet systemd-networkd systemd-resolved ssh poligon-growroot
	# Installed for recipes and stands to enable; off at boot, where they cost time and memory under TCG.
	in_root systemctl disable --quiet nginx postgresql
	# No background apt runs: they hold dpkg's lock when a recipe wants it, and a test machine changes when asked.
	in_root systemctl disable --quiet apt-daily.timer apt-daily-upgrade.timer
	# Each clone is its own machine: a machine-id (hence DHCP client id) and ssh host keys made at its first boot.
	: >"$root/etc/machine-id"
	rm -f "$root/var/lib/dbus/machine-id" "$root"/etc/ssh/ssh_host_*

	boot_loader
	echo "Version=$(in_root dpkg-query -W -f '${Version}' linux-image-amd64) $(readlink "$root/vmlinuz")" >"$WORK/versions"
	if [ -n "${CUSTOMIZE_MORE:-}" ]; then
		"$CUSTOMIZE_MORE" "$root"
	fi
}

# GRUB from the guest's own packages: a core image for BIOS (written after the MBR by build.sh) and BOOTX64.EFI for
# the ESP, each with an early config that finds the root filesystem by UUID, so the disk boots wherever it sits.
boot_loader() {
	[ -e "$root/vmlinuz" ] && [ -e "$root/initrd.img" ] ||
		{ echo "customize: error: no /vmlinuz or /initrd.img symlink in the root" >&2; exit 1; }
	cat >"$root/boot/grub-early.cfg" <<EOF
search --no-floppy --fs-uuid --set=root $ROOT_UUID
set prefix=(\$root)/boot/grub
EOF
	mkdir -p "$root/boot/grub"
	cat >"$root/boot/grub/grub.cfg" <<EOF
# Written by the poligon template build (images/debian/customize.sh); update-grub writes an equivalent one
# from /etc/default/grub.
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
set default=0
set timeout=1
menuentry 'Debian GNU/Linux' {
	search --no-floppy --fs-uuid --set=root $ROOT_UUID
	linux /vmlinuz root=UUID=$ROOT_UUID ro console=tty0 console=ttyS0,115200
	initrd /initrd.img
}
EOF
	local common="part_msdos ext2 fat search search_fs_uuid normal linux configfile echo test serial terminal"
	# shellcheck disable=SC2086 # one module a word
	in_root grub-mkimage -O i386-pc -o /core.img -c /boot/grub-early.cfg -p /boot/grub biosdisk $common
	# shellcheck disable=SC2086
	in_root grub-mkimage -O x86_64-efi -o /BOOTX64.EFI -c /boot/grub-early.cfg -p /boot/grub efi_gop efi_uga $common
	# The modules too, so grub.cfg may insmod more (and update-grub's config works).
	cp -R "$root/usr/lib/grub/i386-pc" "$root/usr/lib/grub/x86_64-efi" "$root/boot/grub/"
}

"$phase"
