"""The steady-state hot loop (capture hop → VAD → endpointer) allocates nothing that stays."""

from __future__ import annotations

import tracemalloc

import numpy as np

from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.observer import LoopObserver
from edge_rt.pipeline import load_stages


class _Snapshots(LoopObserver):
    def __init__(self, at: tuple[int, int]):
        self.at, self.hops, self.snaps = at, 0, []

    def on_hop(self, first, samples):
        self.hops += 1
        if self.hops in self.at:
            self.snaps.append(tracemalloc.take_snapshot())


def test_hops_do_not_grow_memory(tiny_pack):
    stages = load_stages(tiny_pack)
    rng = np.random.default_rng(0)
    quiet_room = (0.001 * rng.standard_normal(16000 * 40)).astype(np.float32)  # 40 s, no speech
    source = FastFileSource(quiet_room)
    sink = TimelineSink(22050, now_s=lambda: 0.0)
    probe = _Snapshots(at=(200, 1200))
    tracemalloc.start()
    try:
        traces = Loop(stages, source, sink, LoopOptions(target="pt"), observers=[probe]).run()
    finally:
        tracemalloc.stop()
    assert traces == [] and probe.hops >= 1200
    first, last = probe.snaps
    # Grouped by the line that allocated (the innermost frame), in edge_rt's own code.
    grown = [d for d in last.compare_to(first, "lineno") if d.size_diff > 0
             and "/edge_rt/" in d.traceback[0].filename]
    total = sum(d.size_diff for d in grown)
    # 1000 hops of 32 ms: anything allocated per hop and kept would show as >= 1000 blocks.
    assert total < 4096, "\n".join(str(d) for d in grown[:10])
