#!/usr/bin/env bash
# Set up .venv (if needed) and run the whole suite: ruff, pytest, then the real-systems suite.
# The suite starts its own redis-server on a free port (tests/conftest.py) and
# never touches any other Redis, so two suites can run side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server is not installed; the suite starts its own." >&2
  echo "Install it (Debian/Ubuntu: 'apt-get install redis-server'; macOS: 'brew install redis') and re-run." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "setting up .venv (first run installs taubot and its test tools; about a minute)…" >&2
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,real]'
.venv/bin/ruff check bot workers shell tests bench
# Four test processes (pytest-xdist), each with its own private redis-server: most tests wait on
# a subprocess or a socket, so four keep two cores busy. TAUBOT_TEST_PROCESSES=0 runs the suite
# in this one process.
.venv/bin/python -m pytest -n "${TAUBOT_TEST_PROCESSES:-4}" "$@"
# The real-systems suite (tests/real: a real Ray head and real MLflow servers on 127.0.0.1, the
# `[real]` extra) is its own run after the main suite; a run given arguments is a targeted one.
if [ "$#" -eq 0 ]; then
  .venv/bin/python -m pytest tests/real
fi
