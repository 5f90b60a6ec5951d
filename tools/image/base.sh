#!/bin/sh
# base.sh [NAME]: make the image NAME (default localhost/poligon-base:bookworm),
# a Debian 12 minbase root made from Debian packages by debootstrap, for a host
# with no container registry. With a registry, build with
# --build-arg BASE=docker.io/library/debian:bookworm-slim instead.
# Needs root (debootstrap) and podman; PODMAN may carry global options
# (PODMAN="podman --storage-driver vfs"); DEBIAN_MIRROR picks the mirror.
set -eu
name=${1:-localhost/poligon-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
podman=${PODMAN:-podman}

if $podman image exists "$name"; then
	echo "base image $name exists"
	exit 0
fi
if ! command -v debootstrap >/dev/null; then
	echo "error: debootstrap not found" >&2
	echo "hint: apt-get install debootstrap (as root)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "error: debootstrap needs root" >&2
	echo "hint: run as root, or build with --build-arg BASE=docker.io/library/debian:bookworm-slim where a registry is reachable" >&2
	exit 1
fi

root=$(mktemp -d /var/tmp/poligon-base.XXXXXX)
chmod 755 "$root" # it becomes the image's /: mktemp made it 0700
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$mirror"

# The same apt sources as the debian:bookworm-slim image, security updates included.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# No docs or man pages in the image, as in the slim one.
cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
SLIM
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log "$root"/tmp/*
# A machine id is made per container, not baked in.
: >"$root/etc/machine-id"

tar -C "$root" --numeric-owner -c . | $podman import --change 'CMD ["/bin/bash"]' - "$name"
echo "base image $name made from Debian packages"
