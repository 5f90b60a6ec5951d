# vm_exec_gui: launch a program in a user's desktop session, run by the
# guest's /bin/sh as root. $1 user, $2 the command, base64.
# The session's environment is the one session.sh read from its process, so
# the program lands on the user's screen.
# (after session.sh, which found the session's process)
vars=$(printf '%s\n' "$senv" | grep -E '^(DISPLAY|XAUTHORITY|WAYLAND_DISPLAY|DBUS_SESSION_BUS_ADDRESS|XDG_RUNTIME_DIR|XDG_SESSION_TYPE|HOME|LANG|LANGUAGE|LC_[A-Z_]+)=' | sed "s/'/'\\\\''/g; s/^\([^=]*\)=\(.*\)$/\1='\2'/" | tr '\n' ' ')
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
