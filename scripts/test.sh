#!/usr/bin/env bash
# Set up .venv (if needed) and run the whole test suite against a real Redis.
# Uses the Redis on 127.0.0.1:6379 when one answers; otherwise starts a private
# redis-server on a free port for this run (and stops it afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

redis_pid=""
cleanup() { [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true; }
trap cleanup EXIT
if [ -z "${TAUBOT_TEST_REDIS_URL:-}" ]; then
  if .venv/bin/python -c 'import redis,sys; redis.Redis(host="127.0.0.1",port=6379,socket_connect_timeout=1).ping()' 2>/dev/null; then
    export TAUBOT_TEST_REDIS_URL="redis://127.0.0.1:6379/13"
  elif command -v redis-server >/dev/null 2>&1; then
    port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null &
    redis_pid=$!
    for _ in $(seq 50); do
      .venv/bin/python -c "import redis; redis.Redis(port=$port).ping()" 2>/dev/null && break
      sleep 0.1
    done
    export TAUBOT_TEST_REDIS_URL="redis://127.0.0.1:$port/13"
  else
    echo "No Redis answers on 127.0.0.1:6379 and redis-server is not installed." >&2
    echo "Install one (Debian/Ubuntu: 'apt-get install redis-server'; macOS: 'brew install redis') and re-run." >&2
    exit 1
  fi
fi
.venv/bin/ruff check bot workers tests bench
.venv/bin/python -m pytest "$@"
