# Visible X11 windows of a user's session, for ui_wait_for and region=.
# $1 user, $2 pattern (a substring of title, class or class name; "" = all).
# Prints "pm NAME" first (the guest's package manager, "-" when none of ours:
# for the hints), then one line per window: id x y w h title, where x y (the
# window's origin on the root window) are "? ?" when xwininfo is missing.
# Exit 4: no session; 5: Wayland; 6: no xdotool. Installs nothing: read-only
# tools run this.
# (after session.sh, which found the session's process)
if ! printf '%s\n' "$senv" | grep -q '^DISPLAY='; then echo "the session of $u is Wayland" >&2; exit 5; fi
export $(printf '%s\n' "$senv" | grep -E '^(DISPLAY|XAUTHORITY)=')
pm=-
for p in apt-get dnf zypper apk; do
	if command -v $p > /dev/null; then pm=$p; break; fi
done
echo "pm $pm"
command -v xdotool > /dev/null || { echo "xdotool is missing" >&2; exit 6; }
# xdotool finds the windows, but its getwindowgeometry is off for a window a
# window manager reparented (it adds the window's offset in its frame twice:
# a title bar's height too low under twm); xwininfo has the X server
# translate the window's origin to the root window.
xwi=
command -v xwininfo > /dev/null && xwi=1
pat=$(printf %s "$2" | sed 's/[][\.*^$(){}+?|]/\\&/g')
ids=$( { xdotool search --onlyvisible --name "$pat"; xdotool search --onlyvisible --class "$pat"; xdotool search --onlyvisible --classname "$pat"; } 2>/dev/null | sort -u)
for id in $ids; do
	if [ -n "$xwi" ]; then
		# "Absolute upper-left" is the corner of the border: the origin is a border width further in.
		g=$(xwininfo -id "$id" 2>/dev/null | awk -F: '
			/^ *Absolute upper-left X:/ { x = $2 } /^ *Absolute upper-left Y:/ { y = $2 }
			/^ *Border width:/ { b = $2 } /^ *Width:/ { w = $2 } /^ *Height:/ { h = $2 }
			END { if (w > 1 && h > 1) print x + b, y + b, w + 0, h + 0 }')
	else
		g=$(xdotool getwindowgeometry --shell "$id" 2>/dev/null | awk -F= '
			$1 == "WIDTH" { w = $2 } $1 == "HEIGHT" { h = $2 } END { if (w > 1 && h > 1) print "?", "?", w + 0, h + 0 }')
	fi
	[ -n "$g" ] || continue # gone meanwhile, or a 1x1 helper window
	echo "$id $g $(xdotool getwindowname "$id" 2>/dev/null)"
done
exit 0
