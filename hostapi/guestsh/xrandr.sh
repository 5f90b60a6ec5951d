# The training dataset's screen mode, set once per boot so the guest's
# coordinates match the console frame. Run by the guest's /bin/sh as root.
# $1 user, $2 the mode, WIDTHxHEIGHT.
# Prints "boot <boot id>", then "mode <outcome>": ok (xrandr -s took it),
# ok-added (the mode was not listed: defined from cvt and added to the
# connected output), failed, or no-xrandr. Exit 4: no session (session.sh).
# (after session.sh, which found the session's process)
echo "boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
command -v xrandr > /dev/null || { echo "mode no-xrandr"; exit 0; }
export $(printf '%s\n' "$senv" | grep -E '^(DISPLAY|XAUTHORITY)=')
[ -n "${DISPLAY:-}" ] || { echo "mode failed"; exit 0; } # a Wayland session without Xwayland
if xrandr -s "$2" > /dev/null 2>&1; then echo "mode ok"; exit 0; fi
w=${2%x*}
h=${2#*x}
line=$(cvt "$w" "$h" 2> /dev/null | sed -n 's/^Modeline //p' | tr -d '"')
out=$(xrandr --current 2> /dev/null | awk '$2 == "connected" { print $1; exit }')
name=${line%% *}
if [ -z "$line" ] || [ -z "$out" ]; then echo "mode failed"; exit 0; fi
# Defined and added before (a server restart in the same boot): these fail, the switch still works.
xrandr --newmode $line > /dev/null 2>&1
xrandr --addmode "$out" "$name" > /dev/null 2>&1
if xrandr --output "$out" --mode "$name" > /dev/null 2>&1; then echo "mode ok-added"; else echo "mode failed"; fi
