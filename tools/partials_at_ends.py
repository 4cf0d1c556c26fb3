#!/usr/bin/env python
"""How long partial captions still run after the end of speech, replaying the real clips live as `edge-rt bench` does.

Every Whisper call of the loop is timed; per utterance end it prints the partial decodes that were running
at the end of speech and how long after it they ended (stopped by the pause watch, loop/pause_watch.py, or
run to their end), then a summary line. ``--no-interrupt`` leaves encoder runs uninterruptible (the loop as
it was before backends/interrupt.py), for a before/after comparison in one checkout. Needs an idle machine.

    python tools/partials_at_ends.py [--pack default] [--no-interrupt]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_rt.audio.files import read_audio  # noqa: E402
from edge_rt.measure.bench import BenchOptions, load_clips, oracle_end, run_clip  # noqa: E402
from edge_rt.pack import BuiltPack  # noqa: E402
from edge_rt.pipeline import load_stages  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pack", default="default")
    ap.add_argument("--no-interrupt", action="store_true", help="encoder runs cannot be interrupted")
    args = ap.parse_args(argv)
    if args.no_interrupt:
        from edge_rt.backends.ort import OrtBoundRun

        del OrtBoundRun.run_unless  # decoding.py then only asks before the encoder run
    stages = load_stages(BuiltPack.load(args.pack))
    calls: list[tuple[int, int, str]] = []
    transcribe = stages.asr.transcribe

    def timed(*a, **k):
        t0 = time.monotonic_ns()
        try:
            r = transcribe(*a, **k)
        except Exception:
            calls.append((t0, time.monotonic_ns(), "stopped"))
            raise
        calls.append((t0, time.monotonic_ns(), "partial" if "stop" in k else "final"))
        return r

    stages.asr.transcribe = timed
    bo = BenchOptions(pack=args.pack)
    runon, lat = [], []
    for c in load_clips(bo):
        audio = read_audio(c["path"])
        calls.clear()
        run = run_clip(stages, audio, bo.loop_options(bo.target_for(c["lang"])), bo.tail_s)
        turn = run.turn(oracle_end(stages.vad, audio))
        if turn.latency_ms is not None:
            lat.append(turn.latency_ms)
        for tr in run.traces:
            end = tr.t_ns.get("speech_end")  # monotonic ns, as the capture clock stamps it
            if end is None:
                continue
            over = [((b - end) / 1e6, kind) for a, b, kind in calls if a < end < b and kind != "final"]
            runon += over
            print(json.dumps({"id": c["id"], "end_reason": tr.end_reason,
                              "running_at_end": [(round(m), k) for m, k in over]}), flush=True)
    stopped = [m for m, k in runon if k == "stopped"]
    ms = np.array([m for m, _ in runon] or [np.nan])
    print(f"ends with a partial running: {len(runon)}; stopped {len(stopped)} (ran on for a median "
          f"{np.median(stopped) if stopped else float('nan'):.0f} ms); all of them ran on for a median "
          f"{np.median(ms):.0f} ms, max {np.max(ms):.0f}; turn latency P50 {np.median(lat):.0f} ms over {len(lat)} clips")
    return 0


if __name__ == "__main__":
    sys.exit(main())
