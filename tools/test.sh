#!/usr/bin/env bash
# Install everything the tests need (apt + pip), build both packs (real weights), run pytest.
# The live-audio tests start a JACK dummy server themselves when none runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/system_deps.sh
EXTRAS=dev,audio bash tools/setup.sh tiny default
. .venv/bin/activate
python -m pytest -q -ra "$@"
# Perf regression: live/serial turn-latency ratio on 3 real clips vs the ratio recorded in the repo.
edge-rt bench --check tests/perf_check.json
