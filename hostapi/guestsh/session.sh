# Finds the desktop session of user $1: the user's newest process with a
# display in its environment (read from /proc: minimal guests have no
# pgrep). Sets u, uid, found (its pid) and senv (its environment, one
# variable a line, read once: the process may be short-lived and gone a
# moment later); exits 4 when there is none, saying how many processes of
# the user it saw.
# The scripts that need a session are this file followed by their own.
u=$1
env_of() { { tr '\0' '\n' < "/proc/$1/environ"; } 2>/dev/null; }
uid=$(id -u "$u" 2>/dev/null)
found=
senv=
seen=0
# One stat for every process (a fork each costs seconds on a slow guest), the newest first.
[ -n "$uid" ] && for d in $(stat -c '%u %n' /proc/[0-9]* 2>/dev/null | awk -v u="$uid" '$1 == u { print $2 }' | sort -t/ -k3 -rn); do
	[ "${d#/proc/}" != "$$" ] || continue
	seen=$((seen + 1))
	e=$(env_of "${d#/proc/}")
	if printf '%s\n' "$e" | grep -qE '^(DISPLAY|WAYLAND_DISPLAY)='; then found=${d#/proc/}; senv=$e; break; fi
done
[ -n "$uid" ] || { echo "no desktop session of $u: the guest has no such user" >&2; exit 4; }
[ -n "$found" ] || { echo "no desktop session of $u: none of their $seen processes has DISPLAY or WAYLAND_DISPLAY (log in first, e.g. vm_login)" >&2; exit 4; }
