#!/bin/sh
# CTest wrapper for the Python binding's tests (bindings.python).
# Usage: run_pytest.sh <python> <deps-dir> <tests-dir>
# Installs pytest into <deps-dir> (a build-tree folder, never the system) when it is not
# importable; exits 77 (reported by CTest as skipped) when it can be neither imported nor
# installed.
PY="$1"; DEPS="$2"; TESTS="$3"
if ! "$PY" -c "import pytest" >/dev/null 2>&1; then
  if [ -d "$DEPS" ] && PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "import pytest" >/dev/null 2>&1; then
    :
  elif "$PY" -m pip install --quiet --disable-pip-version-check --target "$DEPS" pytest >/dev/null 2>&1 &&
       PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "import pytest" >/dev/null 2>&1; then
    :
  else
    echo "SKIPPED: pytest is not importable and could not be installed with pip" >&2
    exit 77
  fi
  PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH
fi
exec "$PY" -m pytest -q -rs -p no:cacheprovider "$TESTS"
