#!/bin/sh
# Command agent of an rxe guest, serving one virtio-serial port ($1).
#
# The host sends one request a line:
#   X <id> <base64 of a shell script>
# The agent runs the script with sh in a new session (so the host can kill
# its whole process group by id, see below), stdin from /dev/null, and
# answers with one line:
#   R <id> <exit status> .<base64 of stdout> .<base64 of stderr>
# While a script runs, its session leader's pid is in /run/sroce/agent/<id>.pid.
# Requests on one port are served one at a time; the host opens several ports
# to run commands concurrently.
port=$1
dir=/run/sroce/agent
mkdir -p $dir
cd /tmp || exit 1

while :; do
	# read returns end-of-file while no host is connected: retry.
	exec 3<>"$port" || exit 1
	while IFS=' ' read -r verb id arg <&3; do
		case $verb in
		X) ;;
		*) continue ;;
		esac
		case $id in
		*[!0-9A-Za-z_-]* | "") continue ;;
		esac
		f=$dir/$id
		printf '%s\n' "$arg" | base64 -d >"$f.sh" 2>/dev/null
		setsid sh "$f.sh" </dev/null >"$f.out" 2>"$f.err" &
		echo $! >"$f.pid"
		wait $!
		rc=$?
		printf 'R %s %s .%s .%s\n' "$id" "$rc" "$(base64 -w0 <"$f.out")" "$(base64 -w0 <"$f.err")" >&3
		rm -f "$f.sh" "$f.out" "$f.err" "$f.pid"
	done
	exec 3<&-
	sleep 0.2
done
