# Sourced by scripts/demo and scripts/test: find Python 3.11+, make .venv, install the project into it.
# Progress goes to stderr, one line per phase (no terminal needed: CI logs read the same).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { echo "overlapdp: $*" >&2; }
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3 python3.13 python3.12 python3.11 python; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      PY="$cand"; break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "overlapdp needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  exit 2
fi
started=$SECONDS
if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')..."
  "$PY" -m venv .venv
fi
# First run: nothing installed yet, pip downloads and builds everything. Later runs only check.
# On the first run pip's own progress (one line per package) shows on stderr, keeping stdout for the
# demo's output (e.g. --json); later runs stay quiet.
if [ -x .venv/bin/overlapdp ]; then
  say "checking that .venv is up to date with pyproject.toml (a few seconds)..."
  quiet="--quiet"
else
  say "installing overlapdp and its dependencies into .venv (first run only, about 2 minutes)..."
  quiet=""
fi
say "upgrading pip"
.venv/bin/python -m pip install $quiet --upgrade pip >&2
say "installing overlapdp${OVERLAPDP_EXTRAS:+[${OVERLAPDP_EXTRAS}]} (editable) and its dependencies"
# No extras: ".", not ".[]" (recent pip refuses an empty extras list).
if [ -n "${OVERLAPDP_EXTRAS:-}" ]; then
  .venv/bin/python -m pip install $quiet -e ".[${OVERLAPDP_EXTRAS}]" >&2
else
  .venv/bin/python -m pip install $quiet -e . >&2
fi
say "ready ($((SECONDS - started)) s)"
