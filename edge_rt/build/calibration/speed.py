"""FP32 vs INT8 latency of one model on this machine (ONNX Runtime CPU, same input, same threads).

The two sessions run alternately, one call each in turn. The speed-up that *decides* (the
``speedup`` field) is the median over runs of the paired ratio ``fp32_i / int8_i`` of
back-to-back calls: load from other processes (the build machine is shared; CI runs on 2
cores) slows both calls of a pair alike and cancels in their ratio, and the median ignores a
pair that a burst hit (the min/min ratio used before depended on each model's single luckiest
call). The minimum and the median of each model are reported beside. The speed check stays a
measurement, which is why ``Int8Options.min_speedup`` is a floor far from every ratio a recipe
has measured (it rejects only the clearly slower ones): a candidate within a few per cent of it
could still go either way; the INT8 step records every ratio so such a case is visible in
``build_report.md``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

import numpy as np

__all__ = ["measure"]


def _describe(feeds: Mapping[str, np.ndarray], most: int = 2) -> str:
    """The first inputs' shapes, e.g. ``mel[1, 80, 500]`` (what identifies the bucket)."""
    shown = [f"{k}{list(np.shape(v))}" for k, v in feeds.items() if np.ndim(v) > 0 and np.size(v) > 1]
    return ", ".join(shown[:most]) + (", ..." if len(shown) > most else "")


def measure(fp32: Path, int8: Path, feeds: Mapping[str, np.ndarray], threads: int = 2,
            runs: int = 7, budget_s: float = 8.0, min_s: float = 0.5, max_runs: int = 400) -> dict:
    """Milliseconds per call of both models on ``feeds`` (a real calibration input).

    At least ``runs`` pairs, and more (up to ``max_runs``) until ``min_s`` is spent: a model of a few ms
    gets a hundred pairs or more, so one burst of other work cannot move the median (seven pairs of the
    1-3 ms Marian encoder once gave x0.52 for a recipe that measures x1.8-2.4: most of its INT8 calls
    took 4x their minimum). Stops early once ``budget_s`` is spent (at least 2 runs each, after one warm-up).
    """
    from edge_rt.backends.ort import OrtEngine, SessionOptions

    so = SessionOptions(intra_op_threads=threads)
    a, b = OrtEngine(fp32, so), OrtEngine(int8, so)
    feeds = dict(feeds)
    a.run(feeds), b.run(feeds)
    ta, tb = [], []
    start = time.perf_counter()
    for i in range(max(runs, max_runs)):
        for eng, acc in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            eng.run(feeds)
            acc.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if (i + 1 >= runs and spent >= min_s) or (i >= 1 and spent > budget_s):
            break
    fp, q = min(ta) * 1e3, min(tb) * 1e3
    paired = float(np.median(np.asarray(ta) / np.asarray(tb)))
    return {"input": _describe(feeds), "threads": threads, "runs": len(ta),
            "fp32_ms": round(fp, 2), "int8_ms": round(q, 2), "speedup": round(paired, 2),
            "min_ratio": round(fp / q, 2),
            "fp32_median_ms": round(float(np.median(ta)) * 1e3, 2), "int8_median_ms": round(float(np.median(tb)) * 1e3, 2)}
