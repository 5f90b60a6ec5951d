# vm_exec_gui: launch a program in a user's desktop session, run by the
# guest's /bin/sh as root. $1 user, $2 the command, base64.
# The session's environment is read from the user's newest process that has
# a DISPLAY or WAYLAND_DISPLAY, so the program lands on their screen.
u=$1
id "$u" > /dev/null 2>&1 || { echo "no user $u in the guest" >&2; exit 3; }
env_of() { tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null; }
found=
for p in $(pgrep -u "$u" | sort -rn); do
	if env_of "$p" | grep -qE '^(DISPLAY|WAYLAND_DISPLAY)='; then found=$p; break; fi
done
[ -n "$found" ] || { echo "no desktop session of $u: nothing of theirs has DISPLAY or WAYLAND_DISPLAY (log in first, e.g. vm_login)" >&2; exit 4; }
vars=$(env_of "$found" | grep -E '^(DISPLAY|XAUTHORITY|WAYLAND_DISPLAY|DBUS_SESSION_BUS_ADDRESS|XDG_RUNTIME_DIR|XDG_SESSION_TYPE|HOME|LANG|LANGUAGE|LC_[A-Z_]+)=' | sed "s/'/'\\\\''/g; s/^\([^=]*\)=\(.*\)$/\1='\2'/" | tr '\n' ' ')
log=$(mktemp /tmp/poligon-gui.XXXXXX)
chmod 644 "$log"
printf %s "$2" | base64 -d > "$log.cmd"
chmod 644 "$log.cmd"
if [ "$u" = "$(id -un)" ]; then
	eval "env $vars setsid sh '$log.cmd'" > "$log" 2>&1 < /dev/null &
elif command -v runuser > /dev/null; then
	eval "runuser -u '$u' -- env $vars setsid sh '$log.cmd'" > "$log" 2>&1 < /dev/null &
else
	eval "su -s /bin/sh '$u' -c \"env $vars setsid sh '$log.cmd'\"" > "$log" 2>&1 < /dev/null &
fi
pid=$!
sleep 2
if kill -0 "$pid" 2> /dev/null; then echo running; else wait "$pid"; echo "exited $?"; fi
head -n 20 "$log"
