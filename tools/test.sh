#!/usr/bin/env bash
# Install everything the tests need (apt + pip), build both packs (real weights), run pytest.
# The live-audio tests start a JACK dummy server themselves when none runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/system_deps.sh
EXTRAS=dev,audio bash tools/setup.sh tiny default
. .venv/bin/activate
python -m pytest -q -ra "$@"
# Perf regression: each stage's time on 3 real clips, divided by a speed probe timed in the same run,
# against tests/perf_check.json (fails on a stage > 1.5x; a uniformly slower machine passes).
edge-rt bench --check tests/perf_check.json
