"""How far the perf check's stage figures move between runs of the same tree on this machine.

    python tools/perf_spread.py --runs 8 --repeats 3 [--slowdown asr=2]

Runs the check's stage timing (``edge-rt bench --check``'s, without the live loop) ``--runs`` times on
tests/perf_check.json's clips and prints each stage's probe-relative figure per run and its largest over
smallest. The check's limit (x1.5) only means something where that spread stays well under it: a 2x
slower stage must land above the limit against any run's figure, an unchanged one under it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.measure.bench import BenchOptions, bench  # noqa: E402
from edge_rt.measure.perf_check import CHECKED_STAGES  # noqa: E402

CHECK_FILE = Path(__file__).resolve().parents[1] / "tests" / "perf_check.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--slowdown", default="", help="test hook, e.g. asr=2 (edge_rt/measure/slowdown.py)")
    ap.add_argument("--json", default=None, help="write the per-run figures here")
    args = ap.parse_args()
    recorded = json.loads(CHECK_FILE.read_text())
    runs = []
    for k in range(args.runs):
        result = bench(BenchOptions(pack=recorded["pack"], precision=recorded["precision"],
                                    clips=tuple(recorded["clips"]), live=False, speed_repeats=args.repeats,
                                    slowdown=args.slowdown))
        runs.append(result["speed"])
        print(f"run {k + 1}: " + "  ".join(f"{s} {result['speed']['relative'][s]:.2f}" for s in CHECKED_STAGES)
              + f"  probe {result['speed']['probe_ms']}", flush=True)
    for s in CHECKED_STAGES:
        values = [r["relative"][s] for r in runs if r["relative"][s]]
        if values:
            print(f"{s:4} {min(values):8.2f} .. {max(values):8.2f}  spread x{max(values) / min(values):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
