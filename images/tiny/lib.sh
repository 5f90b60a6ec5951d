# shellcheck shell=bash disable=SC2153 # NAME and the other template variables come from the build script
# The template builder shared by images/tiny/build.sh and images/tiny-x/build.sh: a Debian 12 kernel plus a
# busybox initramfs with qemu-ga (and, for variants, files from more Debian packages), built only from packages
# fetched with `apt-get download`, then registered in $DATA/templates.
#
# A build script sets these and calls template_main "$@":
#   NAME VMID MEMORY_MB CMDLINE DESCRIPTION   what goes into $NAME.toml
#   MODULES     kernel modules to load at boot; their dependencies come from each .ko's depends= field
#   INIT        the /init script
#   OVERLAYS    rootfs directories copied over the initramfs, in order
#   SOURCES     files and directories whose content the stamp covers (the scripts, INIT, OVERLAYS)
#   PACKAGES    (optional) more Debian packages to unpack; COPY names their paths that go into the image
#
# Host packages it needs, all in a standard Debian 12: bash, coreutils, findutils, grep, sed, mawk, gzip,
# apt (apt-get, apt-cache; `apt-get update` must have run once), dpkg (dpkg-deb), libc-bin (ldd),
# util-linux (flock: optional, serialises concurrent builds); xz-utils or zstd only for a kernel whose modules are
# compressed (bookworm's are not). The cpio archive is written by the downloaded
# busybox, so no host cpio is needed.
#
# Shared libraries of the binaries in the image are copied from the host when it has them all (it has qemu-ga's
# once qemu-guest-agent is installed), otherwise every one is taken from the packages (TINY_LIBS=debs forces it).
#
# Quick when nothing changed: a stamp of the inputs (package versions, the host libraries, the SOURCES' content)
# is kept in $DATA/cache/$NAME; it is recomputed (asking apt) only when the SOURCES' metadata, apt's lists or
# dpkg's status changed. Atomic: the template is built aside and moved into place, the .toml last.

set -euo pipefail
export LC_ALL=C
umask 022

# The kernel modules every template loads: virtio (PCI, console for qemu-ga, blk for the scratch disk, net),
# and button + evdev: the ACPI power button as an input device, which busybox acpid turns into a poweroff.
# shellcheck disable=SC2034 # used by the build scripts
BASE_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_console virtio_blk virtio_net button evdev"

APT_HINT="run apt-get update (as root); the build needs Debian 12 (bookworm) apt sources"

die() {
	printf '%s: error: %s\n' "$NAME" "$1" >&2
	[ -z "${2:-}" ] || printf 'hint: %s\n' "$2" >&2
	exit 1
}
log() { printf '%s: %s\n' "$NAME" "$*" >&2; }

# --- the stamp -------------------------------------------------------------------------------------------

source_hash() {
	{
		find "${SOURCES[@]}" \( -type f -o -type l \) -printf '%m %f %P %l\n' | sort
		find "${SOURCES[@]}" -type f -print0 | sort -z | xargs -0 sha256sum | cut -c1-64
	} | sha256sum | cut -c1-64
}

# Changes whenever the sources, apt's view of the packages or the host's installed packages may have changed.
# Only metadata, few processes: this is all a run does when nothing changed.
quick_key() {
	local key
	read -r key _ < <({
		find "${SOURCES[@]}" -printf '%m %s %T@ %p %l\n'
		ls -l --time-style=+%s /var/lib/apt/lists/ 2>/dev/null
		stat -c '%n %s %Y' /var/lib/dpkg/status /etc/apt/preferences /etc/apt/preferences.d 2>/dev/null
		echo "$DATA ${TINY_LIBS:-}"
	} | sha256sum)
	echo "$key"
}

# The libraries copied into the last image: the host files' content, or the packages they came from.
libs_key() {
	local list=$CACHE/libs.list
	if [ ! -f "$list" ]; then
		echo none
	elif [ "$(head -n1 "$list")" = host ]; then
		tail -n +2 "$list" | xargs -r sha256sum 2>/dev/null || echo changed
	else
		cat "$list"
	fi
}

full_key() {
	{
		source_hash
		echo "$VERSIONS"
		libs_key
	} | sha256sum | cut -c1-64
}

stamp_get() {
	local k v
	[ -f "$CACHE/stamp" ] || return 0
	while read -r k v; do
		[ "$k" != "$1" ] || echo "$v"
	done <"$CACHE/stamp"
}

stamp_put() { printf 'quick %s\nfull %s\n' "$1" "$2" >"$CACHE/stamp.new" && mv -f "$CACHE/stamp.new" "$CACHE/stamp"; }

outputs_present() {
	[ -f "$TEMPLATES/$NAME.toml" ] && [ -f "$TEMPLATES/$NAME/vmlinuz" ] && [ -f "$TEMPLATES/$NAME/initrd.img" ]
}

# --- packages --------------------------------------------------------------------------------------------

APT_OPTS=()
# As root apt downloads as the _apt user, which may not reach a data dir under /root.
[ "$(id -u)" != 0 ] || APT_OPTS=(-o APT::Sandbox::User=root)

# candidates PKG... prints "PKG VERSION" for each package apt can install ("(none)" when it cannot).
candidates() {
	apt-cache policy "$@" 2>/dev/null | awk '/^[^ ]/ { p = $1; sub(/:$/, "", p) } /^  Candidate:/ { print p, $2 }'
}

candidate_of() { awk -v p="$1" '$1 == p { print $2; exit }' <<<"$2"; }

# Sets KPKG (the newest linux-image-6.1.0-N-amd64 with a candidate) and VERSIONS ("PKG VERSION" lines for the
# kernel, busybox-static, qemu-guest-agent and PACKAGES); or SELECT_ERR.
select_packages() {
	local names policy n v p
	names=$(apt-cache pkgnames linux-image-6.1.0- 2>/dev/null | grep -E '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V -r || true)
	if [ -z "$names" ]; then
		SELECT_ERR="apt knows no linux-image-6.1.0-*-amd64 package"
		return 1
	fi
	# shellcheck disable=SC2086 # one package name per word
	policy=$(candidates busybox-static qemu-guest-agent ${PACKAGES:-} $names)
	KPKG=""
	for n in $names; do
		v=$(candidate_of "$n" "$policy")
		if [ -n "$v" ] && [ "$v" != "(none)" ]; then
			KPKG=$n
			break
		fi
	done
	VERSIONS=""
	# shellcheck disable=SC2086 # one package name per word
	for p in "${KPKG:-linux-image-6.1.0-*-amd64}" busybox-static qemu-guest-agent ${PACKAGES:-}; do
		v=$(candidate_of "$p" "$policy")
		if [ -z "$v" ] || [ "$v" = "(none)" ]; then
			SELECT_ERR="apt has no installable version of $p"
			return 1
		fi
		VERSIONS="$VERSIONS$p $v"$'\n'
	done
}

version_of() { candidate_of "$1" "$VERSIONS"; }

versions_line() { sed '/^$/d' <<<"$VERSIONS" | paste -sd, | sed 's/,/, /g'; }

# fetch_deb PKG VERSION: sets DEB to the path of the .deb in the cache, downloading it when missing.
fetch_deb() {
	local enc=${2//:/%3a}
	prefetch "$1" "$2"
	DEB=$(compgen -G "$DEBS/${1}_${enc}_*.deb" | head -n 1) || true
	[ -n "$DEB" ] || die "apt-get download $1=$2 left no ${1}_${enc}_*.deb in $DEBS"
}

# prefetch PKG VERSION [PKG VERSION...]: downloads the missing .debs in one apt-get call (each call costs apt a
# second or so of reading its lists).
prefetch() {
	local want=() dl f
	while [ $# -ge 2 ]; do
		f=$(compgen -G "$DEBS/${1}_${2//:/%3a}_*.deb" || true)
		[ -n "$f" ] || want+=("$1=$2")
		shift 2
	done
	[ ${#want[@]} -gt 0 ] || return 0
	if [ ${#want[@]} -eq 1 ]; then log "downloading ${want[0]}"; else log "downloading ${#want[@]} packages"; fi
	# Into a scratch dir first: an interrupted download never leaves a truncated .deb in the cache.
	dl=$(mktemp -d "$DEBS/.download.XXXXXX")
	if ! (cd "$dl" && apt-get download -q "${APT_OPTS[@]}" "${want[@]}" >&2); then
		rm -rf "$dl"
		die "apt-get download ${want[*]} failed" "$APT_HINT"
	fi
	mv "$dl"/*.deb "$DEBS/"
	rm -rf "$dl"
}

# unpack PKG VERSION DIR: the package's files into DIR.
unpack() {
	fetch_deb "$1" "$2"
	dpkg-deb -x "$DEB" "$3" || die "dpkg-deb -x $DEB failed" "delete $DEB and run again"
}

# lib_deps PKG...: the library packages (lib*, zlib1g) the PKGs depend on directly.
lib_deps() {
	# shellcheck disable=SC2086 # one package name per word
	apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$@" \
		2>/dev/null | awk '$1 ~ /^\|?(Pre)?Depends:$/ && $2 ~ /^(lib|zlib)/ { print $2 }' | sort -u
}

# --- the kernel and its modules ---------------------------------------------------------------------------

declare -A KO=() VISITED=()
ORDER=()

# visit MODULE: copies MODULE (uncompressed) after its dependencies into $KNEW/modules, appending to ORDER.
visit() {
	local m=$1 src deps d
	case ${VISITED[$m]:-} in
	done) return ;;
	active) die "kernel modules: dependency cycle through $m" ;;
	esac
	VISITED[$m]="active"
	src=${KO[$m]:-}
	[ -n "$src" ] || die "kernel modules: $m.ko not found in $KPKG"
	case $src in
	*.ko) cp "$src" "$KNEW/modules/$m.ko" ;;
	*.ko.xz) xz -dc "$src" >"$KNEW/modules/$m.ko" ;;
	*.ko.zst) zstd -qdc "$src" >"$KNEW/modules/$m.ko" ;;
	*.ko.gz) gzip -dc "$src" >"$KNEW/modules/$m.ko" ;;
	*) die "kernel modules: unknown module file $src" ;;
	esac
	# .modinfo holds NUL-separated key=value strings; depends= names the modules this one needs.
	deps=$(tr '\0' '\n' <"$KNEW/modules/$m.ko" | sed -n 's/^depends=//p' | head -n1)
	for d in ${deps//,/ }; do
		visit "${d//-/_}"
	done
	VISITED[$m]="done"
	ORDER+=("$m")
}

# Sets KDIR: the cached vmlinuz + modules/ (with load-order) for this kernel package and module list.
prepare_kernel() {
	local kver x vmlinuz moddir p b m
	kver=$(version_of "$KPKG")
	KDIR=$CACHE/kernel-${KPKG#linux-image-}_${kver//:/%3a}-$(printf '%s' "$MODULES" | sha256sum | cut -c1-12)
	if [ -f "$KDIR/complete" ]; then
		return
	fi
	fetch_deb "$KPKG" "$kver"
	log "unpacking $KPKG $kver"
	x=$WORK/kernel
	mkdir -p "$x"
	unpack "$KPKG" "$kver" "$x"
	vmlinuz=$(find "$x/boot" -maxdepth 1 -name 'vmlinuz-*' | head -n1)
	[ -n "$vmlinuz" ] || die "$KPKG has no /boot/vmlinuz-*"
	moddir=$(find "$x/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)
	[ -n "$moddir" ] || die "$KPKG has no /lib/modules/<version>"
	while IFS= read -r p; do
		b=${p##*/}
		b=${b%%.ko*}
		KO[${b//-/_}]=$p
	done < <(find "$moddir/kernel" -name '*.ko*')
	KNEW=$KDIR.new
	rm -rf "$KNEW"
	mkdir -p "$KNEW/modules"
	for m in $MODULES; do
		visit "$m"
	done
	printf '%s\n' "${ORDER[@]}" >"$KNEW/modules/load-order"
	cp "$vmlinuz" "$KNEW/vmlinuz"
	touch "$KNEW/complete"
	rm -rf "$KDIR" "$x"
	mv "$KNEW" "$KDIR"
}

# --- shared libraries -------------------------------------------------------------------------------------

# list_libs LISTER...: "SONAME PATH" per library the lister (ldd, ld.so --list) names, "MISSING SONAME" when
# unresolved. (The loader crashes on static programs; the shell's report of that is noise.)
list_libs() {
	{ "$@" 2>/dev/null || true; } 2>/dev/null | awk '
		$1 ~ /^\// { next }  # the loader itself
		$2 == "=>" && $3 == "not" { print "MISSING", $1; next }
		$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
}

# elf_files ROOT: the dynamically linked programs and libraries in ROOT (not the kernel modules).
elf_files() {
	local f magic
	while IFS= read -r f; do
		magic=$(head -c4 "$f" | tr -d '\0')
		if [ "$magic" = $'\x7fELF' ]; then echo "$f"; fi
	done < <(find "$1" -path "$1/lib/modules" -prune -o -type f \( -perm -u+x -o -name '*.so*' \) -print)
}

# resolve_libs FILES LISTER...: the sorted union of list_libs for every file.
resolve_libs() {
	local files=$1 f
	shift
	for f in $files; do list_libs "$@" "$f"; done | sort -u
}

# copy_libs ROOT: every library the ELF files in ROOT need, and the loader; writes $CACHE/libs.list.new.
copy_libs() {
	local root=$1 files libs="" sysroot ld libpath todo next seen=" " policy p v loader
	files=$(elf_files "$root")
	if [ "${TINY_LIBS:-}" != debs ]; then
		libs=$(resolve_libs "$files" ldd)
	fi
	if [ "${TINY_LIBS:-}" != debs ] && [ -n "$libs" ] && ! grep -q '^MISSING' <<<"$libs"; then
		loader=/lib64/ld-linux-x86-64.so.2
		{
			echo host
			awk '{ print $2 }' <<<"$libs" | sort -u
			echo "$loader"
		} >"$CACHE/libs.list.new"
	else
		log "taking the shared libraries from their packages"
		# Unpack the library dependencies level by level, and stop as soon as every library resolves: deeper levels
		# hold what the image never loads (Mesa, LLVM for libgl1).
		sysroot=$WORK/libroot
		mkdir -p "$sysroot"
		ld=$sysroot/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
		libpath=$sysroot/lib/x86_64-linux-gnu:$sysroot/usr/lib/x86_64-linux-gnu
		echo debs >"$CACHE/libs.list.new"
		# shellcheck disable=SC2086 # one package name per word
		todo=$(lib_deps qemu-guest-agent ${PACKAGES:-})
		while :; do
			# shellcheck disable=SC2086
			policy=$(candidates $todo)
			# shellcheck disable=SC2046 # "PKG VERSION" pairs
			prefetch $(awk '$2 != "(none)"' <<<"$policy")
			for p in $todo; do
				seen="$seen$p "
				v=$(candidate_of "$p" "$policy")
				if [ -z "$v" ] || [ "$v" = "(none)" ]; then continue; fi
				unpack "$p" "$v" "$sysroot"
				echo "$p $v" >>"$CACHE/libs.list.new"
			done
			if [ -f "$ld" ]; then
				# The loader falls back to the host's library dirs: what it finds there counts as missing.
				libs=$(resolve_libs "$files" "$ld" --library-path "$libpath" --list |
					awk -v root="$sysroot/" '$1 != "MISSING" && index($2, root) != 1 { $0 = "MISSING " $1 } { print }')
				grep -q '^MISSING' <<<"$libs" || break
			fi
			next=""
			# shellcheck disable=SC2086
			for p in $(lib_deps $todo); do
				case $seen in *" $p "*) ;; *) next="$next $p" ;; esac
			done
			[ -n "$next" ] || break
			todo=$next
		done
		[ -f "$ld" ] || die "libc6's package has no ld-linux-x86-64.so.2"
		loader=$ld
	fi
	if grep -q '^MISSING' <<<"$libs"; then
		die "libraries found neither on the host nor in the packages: $(awk '$1 == "MISSING" { printf "%s ", $2 }' <<<"$libs")"
	fi
	mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64"
	while read -r soname f; do
		cp -L "$f" "$root/lib/x86_64-linux-gnu/$soname"
	done <<<"$libs"
	cp -L "$loader" "$root/lib64/ld-linux-x86-64.so.2"
}

# --- the initramfs -----------------------------------------------------------------------------------------

# newc_entry NAME MODE RDEVMAJOR RDEVMINOR: one header-only cpio (newc) entry, for device nodes that an
# unprivileged build cannot create (the kernel needs /dev/console before /init mounts devtmpfs).
newc_entry() {
	local n=$((${#1} + 1))
	printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' 1 "$2" 0 0 1 0 0 0 0 "$3" "$4" "$n" 0
	printf '%s\0' "$1"
	head -c $(((4 - (110 + n) % 4) % 4)) /dev/zero
}

build() {
	local root bb p o
	# shellcheck disable=SC2046 # "PKG VERSION" pairs
	prefetch $(sed -n '/^linux-image-/!p' <<<"$VERSIONS")
	prepare_kernel
	log "assembling the initramfs"
	mkdir -p "$WORK/bb" "$WORK/ga"
	unpack busybox-static "$(version_of busybox-static)" "$WORK/bb"
	unpack qemu-guest-agent "$(version_of qemu-guest-agent)" "$WORK/ga"
	bb=$WORK/bb/bin/busybox
	if [ ! -x "$bb" ] || [ ! -x "$WORK/ga/usr/sbin/qemu-ga" ]; then
		die "busybox-static or qemu-guest-agent lacks its binary"
	fi

	root=$WORK/root
	mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,lib/modules,lib/x86_64-linux-gnu,lib64,dev,proc,sys,run,tmp,root,mnt,var/log}
	chmod 1777 "$root/tmp"
	chmod 700 "$root/root"
	ln -s ../run "$root/var/run"
	if [ -n "${PACKAGES:-}" ]; then
		mkdir -p "$WORK/pkgroot"
		for p in $PACKAGES; do
			unpack "$p" "$(version_of "$p")" "$WORK/pkgroot"
		done
		for p in $COPY; do
			[ -e "$WORK/pkgroot$p" ] || [ -L "$WORK/pkgroot$p" ] || die "no $p in the packages $PACKAGES"
			mkdir -p "$root${p%/*}"
			cp -a "$WORK/pkgroot$p" "$root$p"
		done
	fi
	for o in "${OVERLAYS[@]}"; do
		cp -a "$o/." "$root/"
	done
	[ ! -f "$root/etc/shadow" ] || chmod 600 "$root/etc/shadow"
	install -m 755 "$INIT" "$root/init"
	cp "$bb" "$root/bin/busybox"
	# busybox --install -s, done here: a link for every applet that nothing else provides.
	for p in $("$bb" --list-full); do
		[ "$p" != linuxrc ] || continue
		[ -e "$root/$p" ] || [ -L "$root/$p" ] || ln -s /bin/busybox "$root/$p"
	done
	cp "$WORK/ga/usr/sbin/qemu-ga" "$root/usr/sbin/qemu-ga"
	copy_libs "$root"
	cp "$KDIR/modules/"* "$root/lib/modules/"

	mkdir -p "$WORK/out"
	{
		(cd "$root" && find . -mindepth 1 | sort | "$bb" cpio -o -H newc -R 0:0 2>/dev/null)
		newc_entry dev/console $((0020600)) 5 1
		newc_entry 'TRAILER!!!' 0 0 0
	} | gzip -9 >"$WORK/out/initrd.img"
	cp "$KDIR/vmlinuz" "$WORK/out/vmlinuz"
	log "initramfs $(du -k "$WORK/out/initrd.img" | cut -f1) KiB ($(du -sk "$root" | cut -f1) KiB unpacked), kernel $(du -k "$WORK/out/vmlinuz" | cut -f1) KiB"
}

install_template() {
	local stage=$TEMPLATES/.$NAME.new.$$ old=$TEMPLATES/.$NAME.old.$$ toml=$TEMPLATES/.$NAME.toml.new.$$
	mkdir -p "$stage"
	CLEAN+=("$stage" "$toml")
	mv "$WORK/out/vmlinuz" "$WORK/out/initrd.img" "$stage/"
	cat >"$toml" <<EOF
# $DESCRIPTION
# built by images/$NAME/build.sh from $(versions_line)
name = "$NAME"
vmid = $VMID
kernel = "$NAME/vmlinuz"      # paths relative to the templates dir
initrd = "$NAME/initrd.img"
cmdline = "$CMDLINE"
memory_mb = $MEMORY_MB
cores = 1
firmware = "bios"
disk_gb = 1                  # an empty scratch disk each clone gets (virtio-blk)
EOF
	if [ -e "$TEMPLATES/$NAME" ]; then
		mv "$TEMPLATES/$NAME" "$old"
	fi
	mv "$stage" "$TEMPLATES/$NAME"
	mv -f "$toml" "$TEMPLATES/$NAME.toml"
	rm -rf "$old"
}

# Drops cached .debs of other versions of the packages this build used, and stale kernel parts.
prune_cache() {
	local wanted f p v name
	wanted=$VERSIONS
	if [ "$(head -n1 "$CACHE/libs.list")" = debs ]; then
		wanted=$wanted$(tail -n +2 "$CACHE/libs.list")
	fi
	while read -r p v; do
		[ -n "$p" ] || continue
		for f in "$DEBS/${p}_"*.deb; do
			[ -f "$f" ] || continue
			name=${f##*/}
			[ "$name" = "${p}_${v//:/%3a}_${name##*_}" ] || rm -f "$f"
		done
	done <<<"$wanted"
	for f in "$CACHE"/kernel-*; do
		[ "$f" = "$KDIR" ] || rm -rf "$f"
	done
}

# --- main ----------------------------------------------------------------------------------------------------

# template_main [DATA_DIR]
template_main() {
	DATA=${1:-${POLIGON_DATA:-${XDG_DATA_HOME:-$HOME/.local/share}/poligon}}
	# Absolute: the build changes directory, and a relative path would point elsewhere there.
	mkdir -p "$DATA" && DATA=$(cd "$DATA" && pwd) || { log "error: cannot use $DATA as the data directory"; return 1; }
	TEMPLATES=$DATA/templates
	CACHE=$DATA/cache/$NAME
	DEBS=$DATA/cache/tiny/debs # shared by tiny and its variants
	mkdir -p "$CACHE" "$DEBS" "$TEMPLATES"

	local quick full
	quick=$(quick_key)
	if outputs_present && [ "$(stamp_get quick)" = "$quick" ]; then
		return 0
	fi
	# One build at a time per template; a build that waited here may find the work already done.
	exec 9>"$CACHE/lock"
	if command -v flock >/dev/null; then
		flock 9
		rm -rf "$CACHE"/work.* # left by a build that was killed
	fi
	if outputs_present && [ "$(stamp_get quick)" = "$quick" ]; then
		return 0
	fi

	if ! select_packages; then
		if outputs_present; then
			log "warning: $SELECT_ERR; keeping the existing template ($APT_HINT)"
			return 0
		fi
		die "$SELECT_ERR" "$APT_HINT"
	fi
	full=$(full_key)
	if outputs_present && [ "$(stamp_get full)" = "$full" ]; then
		stamp_put "$quick" "$full"
		return 0
	fi

	CLEAN=()
	WORK=$(mktemp -d "$CACHE/work.XXXXXX")
	CLEAN+=("$WORK")
	trap 'rm -rf "${CLEAN[@]}"' EXIT
	log "building from $(versions_line)"
	build
	install_template
	mv -f "$CACHE/libs.list.new" "$CACHE/libs.list"
	prune_cache
	stamp_put "$quick" "$(full_key)"
	log "template $NAME registered in $TEMPLATES"
}
