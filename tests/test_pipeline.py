"""load_stages: every stage of a pack, loaded two at a time on the CPU, errors as a sequential load raises them."""

from __future__ import annotations

import threading

import pytest

from edge_rt.errors import PackNotBuiltError
from edge_rt.pack import BuiltPack
from edge_rt.pipeline import StageOptions, _load_all, load_stages


def test_loads_run_two_at_a_time_and_come_back_in_stage_order():
    running, seen = [], []
    both = threading.Barrier(2, timeout=10)

    def load(i):
        def go():
            running.append(threading.current_thread().name)
            if i < 2:
                both.wait()  # the first two loads run together, or this times out
            seen.append(i)
            return i
        return go

    assert _load_all([load(i) for i in range(5)], concurrently=True) == [0, 1, 2, 3, 4]
    assert all(name.startswith("edge-rt-load") for name in running)
    assert _load_all([load(i) for i in range(2, 5)], concurrently=False) == [2, 3, 4]


def test_the_first_failing_stage_in_stage_order_is_raised():
    def fail(msg):
        def go():
            raise PackNotBuiltError(msg)
        return go

    with pytest.raises(PackNotBuiltError, match="asr"):
        _load_all([lambda: 0, fail("asr"), fail("tts")], concurrently=True)


def test_a_pack_without_a_stage_names_the_rebuild_through_the_concurrent_load(tiny_pack):
    old = BuiltPack(tiny_pack.name, tiny_pack.dir,
                    {**tiny_pack.manifest, "stages": {k: v for k, v in tiny_pack.manifest["stages"].items()
                                                      if k != "turn"}})
    with pytest.raises(PackNotBuiltError, match=r"no 'turn' stage; rebuild it"):
        load_stages(old, StageOptions(backend="cpu"))
