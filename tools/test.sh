#!/usr/bin/env bash
# Install everything the tests need (apt + pip), build both packs (real weights), run pytest.
# The live-audio tests start a JACK dummy server themselves when none runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/system_deps.sh
EXTRAS=dev,audio bash tools/setup.sh tiny default
. .venv/bin/activate
python -m pytest -q -ra "$@"
