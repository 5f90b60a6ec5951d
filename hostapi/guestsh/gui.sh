# vm_exec_gui: launch a program in a user's desktop session, run by the
# guest's /bin/sh as root. $1 user, $2 the command, base64.
# The session's environment is read from the user's newest process that has
# a DISPLAY or WAYLAND_DISPLAY, so the program lands on their screen.
u=$1
id "$u" > /dev/null 2>&1 || { echo "no user $u in the guest" >&2; exit 3; }
env_of() { tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null; }
# The user's newest process with a display in its environment (from /proc:
# minimal guests have no pgrep).
uid=$(id -u "$u")
found=
for d in $(ls -d /proc/[0-9]* | sort -t/ -k3 -rn); do
	[ "$(stat -c %u "$d" 2>/dev/null)" = "$uid" ] || continue
	if env_of "${d#/proc/}" | grep -qE '^(DISPLAY|WAYLAND_DISPLAY)='; then found=${d#/proc/}; break; fi
done
[ -n "$found" ] || { echo "no desktop session of $u: nothing of theirs has DISPLAY or WAYLAND_DISPLAY (log in first, e.g. vm_login)" >&2; exit 4; }
vars=$(env_of "$found" | grep -E '^(DISPLAY|XAUTHORITY|WAYLAND_DISPLAY|DBUS_SESSION_BUS_ADDRESS|XDG_RUNTIME_DIR|XDG_SESSION_TYPE|HOME|LANG|LANGUAGE|LC_[A-Z_]+)=' | sed "s/'/'\\\\''/g; s/^\([^=]*\)=\(.*\)$/\1='\2'/" | tr '\n' ' ')
log=$(mktemp /tmp/poligon-gui.XXXXXX)
chmod 644 "$log"
printf %s "$2" | base64 -d > "$log.cmd"
chmod 644 "$log.cmd"
# The redirections go on a subshell, not on eval: a shell keeps a saved copy
# of the agent's output pipe while a redirected builtin runs, and the agent
# would wait for the program to exit.
if [ "$u" = "$(id -un)" ]; then
	(eval "env $vars setsid sh '$log.cmd'") > "$log" 2>&1 < /dev/null &
elif command -v runuser > /dev/null; then
	(eval "runuser -u '$u' -- env $vars setsid sh '$log.cmd'") > "$log" 2>&1 < /dev/null &
else
	(eval "su -s /bin/sh '$u' -c \"env $vars setsid sh '$log.cmd'\"") > "$log" 2>&1 < /dev/null &
fi
pid=$!
sleep 2
if kill -0 "$pid" 2> /dev/null; then echo running; else wait "$pid"; echo "exited $?"; fi
head -n 20 "$log"
