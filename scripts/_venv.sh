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
created=""
if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')..."
  "$PY" -m venv .venv
  created=1
fi
# Install only when something is missing: .venv/overlapdp-installed records the hash of pyproject.toml and
# the extras of the last successful install. A later run whose pyproject.toml is unchanged and whose
# extras were installed (dev and all include the others) installs nothing and needs no network.
want="${OVERLAPDP_EXTRAS:-}"
stamp=.venv/overlapdp-installed
digest=$(.venv/bin/python -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' pyproject.toml 2>/dev/null || echo none)
covered() {  # are the extras "$1" (comma-separated) among those recorded in the stamp?
  [ -x .venv/bin/overlapdp ] && [ -f "$stamp" ] || return 1
  [ "$(sed -n 1p "$stamp")" = "$digest" ] || return 1
  local have; have=",$(sed -n 2p "$stamp"),"
  case "$have" in *,dev,*|*,all,*) return 0 ;; esac
  local e; IFS=',' read -ra extras <<< "$1"
  for e in "${extras[@]}"; do
    [ -z "$e" ] && continue
    case "$have" in *",$e,"*) ;; *) return 1 ;; esac
  done
  return 0
}
if covered "$want"; then
  say ".venv is up to date with pyproject.toml${want:+ and [${want}]}: nothing to install"
  say "ready ($((SECONDS - started)) s)"
  return 0 2>/dev/null || exit 0
fi
# First run: nothing installed yet, pip downloads and builds everything. On the first run pip's own
# progress (one line per package) shows on stderr, keeping stdout for the demo's output (e.g. --json).
if [ -x .venv/bin/overlapdp ]; then
  say "pyproject.toml or the extras changed: updating .venv (needs the package index)..."
  quiet="--quiet"
else
  say "installing overlapdp and its dependencies into .venv (first run only, about 2 minutes)..."
  quiet=""
fi
if [ -n "$created" ]; then
  say "upgrading pip"
  .venv/bin/python -m pip install $quiet --upgrade pip >&2
fi
say "installing overlapdp${want:+[${want}]} (editable) and its dependencies"
# No extras: ".", not ".[]" (recent pip refuses an empty extras list).
if [ -n "$want" ]; then
  .venv/bin/python -m pip install $quiet -e ".[${want}]" >&2
else
  .venv/bin/python -m pip install $quiet -e . >&2
fi
# Record what is installed now: the extras of the earlier stamp (same pyproject.toml) and these.
previous=""
if [ -f "$stamp" ] && [ "$(sed -n 1p "$stamp")" = "$digest" ]; then previous=$(sed -n 2p "$stamp"); fi
printf '%s\n%s\n' "$digest" "$(echo "${previous},${want}" | tr ',' '\n' | sed '/^$/d' | sort -u | paste -sd, -)" > "$stamp"
say "ready ($((SECONDS - started)) s)"
