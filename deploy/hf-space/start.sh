#!/bin/sh
# Runs the gateway and the app in one container (a Docker Space). The
# gateway listens on 127.0.0.1 only: the app is the Space's one public
# port. On SIGTERM (the Space stopping or restarting) the app stops taking
# requests first, then the gateway drains its calls in flight
# (drain_timeout), and the script exits with the gateway's status. If
# either process dies on its own, the other is stopped and the container
# exits, so that the Space restarts both.
set -u

: "${GRADIOPOOL_LISTEN:=127.0.0.1:8080}"
export GRADIOPOOL_LISTEN
export GRADIOPOOL_URL="http://${GRADIOPOOL_LISTEN}"

/app/bin/gradiopool serve &
gw=$!
# APP_MAIN: the app's entry point (the Next.js image sets its standalone
# server.js).
node "${APP_MAIN:-/app/app/server.mjs}" &
app=$!

stop() {
	kill -TERM "$app" 2>/dev/null
	wait "$app" 2>/dev/null
	kill -TERM "$gw" 2>/dev/null
	wait "$gw"
	exit $?
}
trap stop TERM INT

# Wait until one of them ends (the trap interrupts this wait).
while kill -0 "$gw" 2>/dev/null && kill -0 "$app" 2>/dev/null; do
	sleep 1 &
	wait $!
done
echo "start.sh: a process ended on its own; stopping the other" >&2
stop
