#!/usr/bin/env bash
# Starts one of this folder's apps on a real Gradio release, using the Python
# environments that the real-Gradio set-up scripts build under $ROOT
# (Gradio 3.50.2 on the host's Python in $ROOT/env/3.50.2; 4.x-6.x in the
# Debian 13 chroot $ROOT/chroot-trixie under /opt/rg/env/VERSION).
#
#   ROOT=/tmp/realgradio bash testdata/realgradio/start.sh APP.py VERSION PORT
#   e.g. start.sh research_app.py 5.49.1 7880   (the captured app, for the conformance suite)
#
# Prints the server's PID; stop it with kill PID. Loopback only.
set -euo pipefail
ROOT=${ROOT:-/tmp/realgradio}
HERE=$(cd "$(dirname "$0")" && pwd)
APP=$1 V=$2 PORT=$3
LOG=$ROOT/logs/$(basename "$APP" .py)-$PORT.log
mkdir -p "$ROOT/logs"
if [ "$V" = 3.50.2 ]; then
  GRADIO_ANALYTICS_ENABLED=False PYTHONPATH=$ROOT/env/3.50.2 nohup /usr/bin/python3 "$HERE/$APP" "$PORT" >"$LOG" 2>&1 &
else
  C=$ROOT/chroot-trixie
  mountpoint -q "$C/proc" || mount -t proc proc "$C/proc"
  mkdir -p "$C/opt/rg/apps" && cp "$HERE/$APP" "$C/opt/rg/apps/"
  nohup chroot "$C" env GRADIO_ANALYTICS_ENABLED=False HOME=/root PYTHONPATH=/opt/rg/env/$V \
    python3 "/opt/rg/apps/$APP" "$PORT" >"$LOG" 2>&1 &
fi
PID=$!
for _ in $(seq 1 120); do
  curl -sf -m 2 "http://127.0.0.1:$PORT/config" >/dev/null && { echo "$PID"; exit 0; }
  sleep 0.5
done
echo "did not start: $(tail -3 "$LOG")" >&2
exit 1
