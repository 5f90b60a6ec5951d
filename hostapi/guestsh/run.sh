# vm_run's state machine, run by the guest's /bin/sh as root.
# $1 state dir, $2 start|restart|status, $3 the command, base64.
# The run lives in $1: cmd, start (epoch), pid, out (stdout+stderr), exit.
d=$1
[ "$2" = restart ] && rm -rf "$d"
if [ "$2" != status ] && [ ! -d "$d" ]; then
	mkdir -p "$d" && chmod 700 "$d" || exit 90
	printf %s "$3" | base64 -d > "$d/cmd" || exit 91
	date +%s > "$d/start"
	cat > "$d/run" <<'RUN'
d=$(dirname "$0")
echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"
umask 022
cd /
sh "$d/cmd" > "$d/out" 2>&1
echo $? > "$d/exit.tmp" && mv "$d/exit.tmp" "$d/exit"
RUN
	setsid sh "$d/run" < /dev/null > /dev/null 2>&1 &
fi
[ -d "$d" ] || { echo "none -1 0"; exit 0; }
now=$(date +%s)
start=$(cat "$d/start" 2>/dev/null || echo "$now")
finished() { [ -f "$d/exit" ] && echo "done $(cat "$d/exit") $(( $(stat -c %Y "$d/exit") - start ))"; }
# The exit file is looked at again after the pid: the run may end between.
# The pid file appears whole (renamed into place), a few moments after start.
if finished; then :
elif [ -f "$d/pid" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; then
	echo "running 0 $((now - start))"
elif finished; then :
elif [ ! -f "$d/pid" ] && [ $((now - start)) -lt 5 ]; then
	echo "running 0 $((now - start))"
else
	echo "lost -1 $((now - start))"
fi
tail -n 20 "$d/out" 2>/dev/null
exit 0
