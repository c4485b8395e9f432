#!/usr/bin/env bash
# Installs what `make test` needs and is missing: Node.js and npm (the
# official JS client's conformance suite), redis-server (the real-Redis
# tests), chromium (the dashboard's headless browser test) and prometheus
# (its promtool checks and tests deploy/prometheus/alerts.yml). As root it
# uses apt-get; otherwise it names the packages to install and fails, so
# the tests never skip silently.
set -euo pipefail

need=()
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus) # promtool: the alert rules' check and tests
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "make test needs these packages, which are missing: ${need[*]}" >&2
  echo "install them (Debian/Ubuntu: sudo apt-get install ${need[*]}) and run make test again" >&2
  exit 1
fi
echo "installing missing test dependencies: ${need[*]}" >&2
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
