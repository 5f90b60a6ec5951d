# The training dataset's AT-SPI dump, run by the guest's /bin/sh as root.
# $1 user, $2 the dump script (atspi-dump.py), base64.
# Prints "boot <boot id>", then the dump script's JSON. The script runs as
# the session's user with the session's environment, from their own runtime
# directory (mode 0700, theirs: not a predictable path in a world-writable
# /tmp), and is killed when it outlives its deadline.
# Exit 4: no session (session.sh); 7: no python3; 8: no private runtime
# directory; 3: the script found no AT-SPI to read; the rest: it failed.
# (after session.sh, which found the session's process)
echo "boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
rt=$(printf '%s\n' "$senv" | sed -n 's/^XDG_RUNTIME_DIR=//p' | head -n 1)
[ -n "$rt" ] || rt=/run/user/$uid
if [ "$(stat -c '%u %a' "$rt" 2>/dev/null)" != "$uid 700" ]; then
	echo "the runtime directory $rt of $u is missing or not theirs alone (mode 0700): the dump runs from nowhere else" >&2
	exit 8
fi
command -v python3 > /dev/null || { echo "no python3 in the guest: the AT-SPI dump needs python3 with pyatspi" >&2; exit 7; }
script=$2
# The session's variables as env arguments (no eval: a value is data).
set --
while IFS= read -r v; do [ -n "$v" ] && set -- "$@" "$v"; done <<VARS
$(printf '%s\n' "$senv" | grep -E '^(DISPLAY|XAUTHORITY|WAYLAND_DISPLAY|DBUS_SESSION_BUS_ADDRESS|XDG_SESSION_TYPE|XDG_CURRENT_DESKTOP|HOME|PATH|LANG|LANGUAGE|LC_[A-Z_]+|GTK_THEME)=')
VARS
set -- "$@" "XDG_RUNTIME_DIR=$rt"
# As the user: the script goes into a new file of their runtime directory
# (mktemp: never an existing name), runs there, and is removed.
dump='umask 077
cd "$XDG_RUNTIME_DIR" || exit 9
f=$(mktemp ./poligon-atspi.XXXXXX) || exit 9
cat > "$f"
s=$(xdpyinfo 2> /dev/null | sed -n "s/^ *dimensions: *\([0-9]*x[0-9]*\) pixels.*/\1/p")
[ -n "$s" ] || s=$(xrandr --current 2> /dev/null | sed -n "s/.* current \([0-9]*\) x \([0-9]*\),.*/\1x\2/p")
t=
command -v timeout > /dev/null && t="timeout -s KILL 25"
POLIGON_SCREEN=$s $t python3 "$f"
rc=$?
rm -f "$f"
exit $rc'
q() { printf "'%s'" "$(printf %s "$1" | sed "s/'/'\\\\''/g")"; }
if [ "$u" = "$(id -un)" ]; then
	printf %s "$script" | base64 -d | env "$@" sh -c "$dump"
elif command -v runuser > /dev/null; then
	printf %s "$script" | base64 -d | runuser -u "$u" -- env "$@" sh -c "$dump"
else
	cmd=env
	for a in "$@"; do cmd="$cmd $(q "$a")"; done
	printf %s "$script" | base64 -d | su -s /bin/sh "$u" -c "$cmd sh -c $(q "$dump")"
fi
