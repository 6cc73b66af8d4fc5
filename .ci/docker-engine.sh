#!/bin/sh
# Make sure a Docker engine answers on this machine; idempotent.
#
# If `docker info` already works, nothing happens. Otherwise, as root on a Debian-like
# machine: install Debian's docker.io when dockerd is missing, start dockerd in the
# background with --live-restore (docs/security.md H-05: kernels survive an engine restart), and
# wait until it answers. Exits non-zero with a clear message if it does not.
#
# Environment:
#   DOCKERD_TIMEOUT_S   how long to wait for the engine to answer (default 60)
#   DOCKERD_LOG         where dockerd's output goes (default /tmp/dockerd.log)
set -eu

timeout_s="${DOCKERD_TIMEOUT_S:-60}"
log="${DOCKERD_LOG:-/tmp/dockerd.log}"

say() { printf 'docker-engine: %s\n' "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }

engine_answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
    say "engine is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || fail "no Docker engine answers and starting one needs root"

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || fail "dockerd is missing and apt-get is not available"
    say "installing Debian's docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || fail "apt-get update failed"
    apt-get install -y -q docker.io || fail "apt-get install docker.io failed"
fi

# A dockerd may be running but still starting (or wedged): only start one if none runs,
# since a second instance would fight over /var/run/docker.pid.
pidfile=/var/run/docker.pid
if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "dockerd is running but not answering yet; waiting for it"
else
    say "starting dockerd (log: $log)"
    nohup dockerd --live-restore >"$log" 2>&1 &
fi

deadline=$(( $(date +%s) + timeout_s ))
until engine_answers; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        say "last lines of $log:"
        tail -n 20 "$log" >&2 2>/dev/null || true
        fail "Docker engine did not answer within ${timeout_s}s"
    fi
    sleep 1
done
say "engine is up ($(docker version --format '{{.Server.Version}}'))"
