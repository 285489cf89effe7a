# Sourced by scripts/demo and scripts/test: find Python 3.11+, make .venv, install the project into it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
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
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# No extras: ".", not ".[]" (recent pip refuses an empty extras list).
if [ -n "${OVERLAPDP_EXTRAS:-}" ]; then
  .venv/bin/python -m pip install --quiet -e ".[${OVERLAPDP_EXTRAS}]"
else
  .venv/bin/python -m pip install --quiet -e .
fi
