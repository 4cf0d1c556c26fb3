#!/usr/bin/env bash
# Install everything the tests need, build both packs (real weights), run pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=dev bash tools/setup.sh tiny default
. .venv/bin/activate
python -m pytest -q -ra "$@"
