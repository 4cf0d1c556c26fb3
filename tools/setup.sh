#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with edge_rt installed,
# then the offline build of the model pack(s) named as arguments (default: default).
#   bash tools/setup.sh            # runtime only, builds engines/default
#   EXTRAS=dev bash tools/setup.sh default tiny
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "edge_rt needs Python >= 3.10 (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.x" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --disable-pip-version-check -U pip
spec=".[build${EXTRAS:+,$EXTRAS}]"
python -m pip install -q --disable-pip-version-check -e "$spec"
packs=("$@")
[ ${#packs[@]} -eq 0 ] && packs=(default)
for p in "${packs[@]}"; do
  python tools/build_engines.py --pack "$p"
done
