"""The INT8 step's speed figure: enough paired runs that a fast model's median is not a handful of calls."""

from __future__ import annotations

import numpy as np

from edge_rt.build.calibration.speed import measure


def test_a_fast_model_is_timed_over_many_pairs_a_slow_one_over_the_minimum(tiny_pack):
    fp32 = tiny_pack.dir / tiny_pack.stage("mt")["models"]["en-pt/encoder"]["fp32"]
    feeds = {"src_ids": np.arange(5, 21, dtype=np.int64)[None], "src_mask": np.ones((1, 16), np.float32)}
    fast = measure(fp32, fp32, feeds, threads=1, min_s=0.2)
    # A ~1-5 ms model: seven pairs were the whole figure before; now at least min_s of pairs. How many that is
    # depends on the machine (19 pairs of 5.1 ms on a 2-core AMD EPYC, 2026-12-05: "> 20" failed there), so the
    # test asks for more than the minimum of 7 (seven pairs of this model take well under min_s anywhere).
    assert fast["runs"] > 7, fast
    assert 0.5 < fast["speedup"] < 2.0, fast  # the same file against itself: near 1
    slow = measure(fp32, fp32, feeds, threads=1, runs=3, min_s=0.0)
    assert slow["runs"] == 3, slow  # nothing beyond the minimum when min_s is already spent
