# Visible X11 windows of a user's session, for ui_wait_for and region=.
# $1 user, $2 pattern (a substring of title, class or class name; "" = all).
# Prints "installed xdotool" first when it had to install it, then one line
# per window: id x y w h title. Exit 4: no session; 5: Wayland; 6: no xdotool.
# (after session.sh, which found the session's process)
if ! printf '%s\n' "$senv" | grep -q '^DISPLAY='; then echo "the session of $u is Wayland" >&2; exit 5; fi
export $(printf '%s\n' "$senv" | grep -E '^(DISPLAY|XAUTHORITY)=')
if ! command -v xdotool > /dev/null; then
	if command -v apt-get > /dev/null && apt-get install -y xdotool > /tmp/poligon-xdotool.log 2>&1; then
		echo "installed xdotool"
	else
		echo "xdotool is missing and apt-get install -y xdotool failed" >&2; exit 6
	fi
fi
pat=$(printf %s "$2" | sed 's/[][\.*^$(){}+?|]/\\&/g')
ids=$( { xdotool search --onlyvisible --name "$pat"; xdotool search --onlyvisible --class "$pat"; xdotool search --onlyvisible --classname "$pat"; } 2>/dev/null | sort -u)
for id in $ids; do
	eval "$(xdotool getwindowgeometry --shell "$id" 2>/dev/null)" || continue
	[ "${WIDTH:-0}" -gt 1 ] && [ "${HEIGHT:-0}" -gt 1 ] || continue
	echo "$id $X $Y $WIDTH $HEIGHT $(xdotool getwindowname "$id" 2>/dev/null)"
done
exit 0
