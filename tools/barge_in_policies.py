#!/usr/bin/env python
"""Which barge-in policy hears a person who talks over edge-rt's own speech in loudspeaker mode?

Runs the loudspeaker scenario of ``tests/loop/test_loudspeaker_jack.py`` (the real clips through a JACK
dummy server, edge-rt's output fed back into its input 6 dB down and 40 ms late; the third clip starts
while edge-rt speaks the second one's translation) with each policy in turn, interleaved, and prints per
run: which clips were translated, the barge-in clip's transcript and its word error rate, how much
translated speech was played, and how many utterances' speech a barge-in stopped before it was heard.

    python tools/barge_in_policies.py --runs 8 --policies duck pause stop

About 50 s a run (tiny pack). Needs jackd (`apt install jackd2`) and the dev extra (JACK-Client).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge_rt.loop.output import BARGE_IN  # noqa: E402
from edge_rt.measure.scoring import error_rate  # noqa: E402
from tests.jack import ensure_jack  # noqa: E402
from tests.loop import test_loudspeaker_jack as scenario  # noqa: E402

BARGE_REF = scenario.BARGE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="runs per policy (interleaved)")
    ap.add_argument("--policies", nargs="+", default=["duck", "pause", "stop"], choices=BARGE_IN)
    ap.add_argument("--speech-dir", default=str(ROOT.parent / "shared" / "data" / "speech"))
    args = ap.parse_args(argv)
    speech_dir = Path(args.speech_dir)
    manifest = [json.loads(line) for line in (speech_dir / "manifest.jsonl").read_text().splitlines() if line.strip()]
    reference = next(m["text"] for m in manifest if m["id"] == BARGE_REF)
    jack = ensure_jack()
    totals: dict[str, dict] = {p: {"runs": 0, "barge_translated": 0, "refs": [], "hyps": [], "speech_out_s": 0.0,
                                   "stopped_unheard": 0, "self": 0} for p in args.policies}
    try:
        for i in range(args.runs):
            for policy in args.policies:
                with tempfile.TemporaryDirectory() as d:
                    r = scenario._run(Path(d), speech_dir, manifest, f"{policy}{i}",
                                      ["--loudspeaker", "--barge-in", policy], scenario.FEEDBACK)
                barge = [u for u in r["utterances"] if u["start"] > r["spans"][-1][0] - scenario.SLACK_S]
                heard = " ".join(u["text"] for u in barge)
                t = totals[policy]
                t["runs"] += 1
                t["barge_translated"] += bool(r["translated"][-1])
                t["refs"].append(reference)
                t["hyps"].append(heard)
                t["speech_out_s"] += r["speech_out_s"]
                t["stopped_unheard"] += sum("stopped before it was heard" in u["dropped"] for u in r["utterances"])
                t["self"] += sum(1 for u in r["self"] if u["translation"])
                print(json.dumps({"policy": policy, "run": i, "translated": r["translated"], "barge_text": heard}),
                      flush=True)
    finally:
        if jack is not None:
            jack.terminate()
    for policy, t in totals.items():
        _, wer = error_rate(t["refs"], t["hyps"], "en")
        print(f"{policy}: barge-in clip translated {t['barge_translated']}/{t['runs']}, its WER {wer:.1f} %, "
              f"translated speech played {t['speech_out_s'] / t['runs']:.1f} s a run, utterances stopped unheard "
              f"{t['stopped_unheard']}, own voice translated {t['self']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
