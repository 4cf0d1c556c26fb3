#!/usr/bin/env python
"""Turn latency with Piper streamed in vocoder windows against whole sentences, in one run, clip by clip.

Replays the clips spoken in English by Piper (every non-English clip) live as `edge-rt bench` does, each
twice: once with the pack's streaming vocoder (stages/tts/vocoder.py), once with whole sentences
(``TtsOptions.vocoder=None``), the order alternating from clip to clip. Prints bench's turn latency and
end-of-speech wait per clip and run, then P50/P95 of each and the paired ratio. Needs an idle machine
(~10 min for the 21 clips).

    python tools/tts_stream_ab.py [--pack default] [--limit N]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.audio.files import read_audio  # noqa: E402
from edge_rt.backends.factory import OrtEngines  # noqa: E402
from edge_rt.measure import bench  # noqa: E402
from edge_rt.stages.tts.voice import Tts  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pack", default="default")
    ap.add_argument("--limit", type=int, default=None, help="at most this many clips")
    args = ap.parse_args(argv)
    options = bench.BenchOptions(pack=args.pack, baseline=False, backend="cpu")
    pack, stages = bench.load_bench_stages(options)
    streamed = stages.tts
    whole = Tts.from_pack(pack, dataclasses.replace(streamed.options, vocoder=None), engines=OrtEngines(pack))
    clips = [c for c in bench.load_clips(options) if c["lang"] != "en"][: args.limit]
    rows = []
    for i, clip in enumerate(clips):
        audio = read_audio(clip["path"])
        end = bench.oracle_end(stages.vad, audio)
        runs = [("stream", streamed), ("whole", whole)]
        result = {}
        for name, tts in (runs if i % 2 == 0 else runs[::-1]):
            stages.tts = tts
            run = bench.run_clip(stages, audio, options.loop_options(options.target_for(clip["lang"])), options.tail_s)
            turn = run.turn(end)
            wait = turn.trace.stages_ms()["endpoint_wait"] if turn.status == "ok" else None
            result[name] = (turn.latency_ms, wait)
        rows.append(result)
        print(clip["id"], "  ".join(f"{k}: latency {_ms(v[0])} wait {_ms(v[1])}" for k, v in result.items()), flush=True)
    for name in ("stream", "whole"):
        lat = [r[name][0] for r in rows if r[name][0] is not None]
        if lat:
            print(f"{name}: turn latency P50 {np.percentile(lat, 50):.0f} ms, P95 {np.percentile(lat, 95):.0f} ms "
                  f"({len(lat)} clips)")
    both = [(r["stream"][0], r["whole"][0]) for r in rows if r["stream"][0] and r["whole"][0]]
    if both:
        print(f"stream / whole: P50 x{np.median([a for a, _ in both]) / np.median([b for _, b in both]):.3f}, "
              f"median of the per-clip ratios x{np.median([a / b for a, b in both]):.3f} ({len(both)} clips)")
    return 0


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} ms"


if __name__ == "__main__":
    sys.exit(main())
