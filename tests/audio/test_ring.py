"""The SPSC ring: arithmetic, policies, and real threads hammering both ends."""

from __future__ import annotations

import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

from edge_rt.audio.ring import Ring


def test_capacity_must_be_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        Ring(1000)
    with pytest.raises(ValueError, match="policy"):
        Ring(1024, policy="block")


def test_wraparound_keeps_order_and_indices():
    ring = Ring(8)
    out = np.empty(5, np.float32)
    seen = []
    for k in range(10):
        ring.write(np.arange(k * 5, k * 5 + 5, dtype=np.float32))
        first, n = ring.read_into(out)
        assert first == k * 5 and n == 5
        seen.extend(out[:n])
    assert seen == list(range(50))
    assert ring.stats.overruns == 0


def test_overwrite_drops_oldest_and_records_the_gap():
    ring = Ring(8)
    ring.write(np.arange(12, dtype=np.float32))  # 4 oldest lost
    first, got = ring.read(16)
    assert first == 4 and list(got) == list(range(4, 12))
    assert ring.stats.overruns == 1 and ring.stats.dropped == 4
    assert ring.stats.gaps == [(0, 4)]
    ring.write(np.arange(12, 30, dtype=np.float32))  # an 18-sample block into 8
    first, got = ring.read(16)
    assert first == 22 and list(got) == list(range(22, 30))
    assert ring.stats.dropped == 4 + 10


def test_reject_back_pressures_the_producer():
    ring = Ring(8, policy="reject")
    assert ring.write(np.ones(6, np.float32)) == 6
    assert ring.write(np.ones(6, np.float32)) == 2
    assert ring.stats.rejected == 4 and ring.free() == 0
    assert ring.write(np.ones(1, np.float32)) == 0
    ring.read(3)
    assert ring.free() == 3


def test_empty_read_with_silence_counts_underrun():
    ring = Ring(16, policy="reject")
    ring.write(np.full(3, 0.5, np.float32))
    out = np.full(8, 9.0, np.float32)
    first, n = ring.read_into(out, fill_silence=True)
    assert (first, n) == (0, 3)
    assert list(out) == [0.5] * 3 + [0.0] * 5
    assert ring.stats.underruns == 1 and ring.stats.silence == 5


@pytest.mark.parametrize("policy", ["reject", "overwrite"])
def test_threads_hammering_lose_and_duplicate_nothing(policy):
    """A producer and a consumer thread; every sample is its own index.

    With 'reject' nothing may be lost; with 'overwrite' (a slow consumer) every
    sample received is at its right index, in order, and every lost sample is
    counted in a recorded gap.
    """
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads as often as possible
    try:
        total = 200_000
        ring = Ring(1024, policy=policy)
        received = np.full(total, -1.0, np.float64)
        done = threading.Event()

        def produce():
            i = 0
            rng = np.random.default_rng(0)
            while i < total:
                n = int(rng.integers(1, 300))
                block = np.arange(i, min(i + n, total), dtype=np.float32)
                i += ring.write(block)
            done.set()

        def consume():
            out = np.empty(257, np.float32)
            last = -1
            while True:
                finished = done.is_set()
                first, n = ring.read_into(out)
                if n:
                    assert first > last, "indices go backwards"
                    # values equal their sample index: no tearing, no duplication
                    np.testing.assert_array_equal(out[:n], np.arange(first, first + n, dtype=np.float32))
                    received[first : first + n] = out[:n]
                    last = first + n - 1
                    if policy == "overwrite" and (first // 257) % 16 == 0:
                        time.sleep(0.0005)  # a slow consumer: the producer must overwrite
                elif finished:
                    return

        t = threading.Thread(target=produce)
        c = threading.Thread(target=consume)
        c.start(), t.start()
        t.join(60), c.join(60)
        assert not t.is_alive() and not c.is_alive()
    finally:
        sys.setswitchinterval(old)
    got = received >= 0
    if policy == "reject":
        assert got.all() and ring.stats.dropped == 0
    else:
        assert ring.stats.dropped > 0, "the test did not exercise overwriting"
        assert got.sum() + ring.stats.dropped == total
        lost = np.zeros(total, bool)
        for first, count in ring.stats.gaps:
            lost[first : first + count] = True
        if len(ring.stats.gaps) < ring.stats.max_gaps:
            np.testing.assert_array_equal(lost, ~got)


def test_steady_state_read_write_allocates_nothing():
    ring = Ring(4096)
    block = np.ones(512, np.float32)
    out = np.empty(512, np.float32)
    for _ in range(100):  # warm up
        ring.write(block), ring.read_into(out)
    tracemalloc.start()
    snap1 = tracemalloc.take_snapshot()
    for _ in range(10_000):
        ring.write(block)
        ring.read_into(out)
    snap2 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap2.compare_to(snap1, "filename") if "ring.py" in str(s.traceback))
    assert grown < 1024, f"ring.py allocated {grown} bytes over 10k hops"


def test_peek_newest_copies_the_latest_samples_across_the_wrap_without_consuming():
    ring = Ring(8)
    out = np.full(3, -1.0, np.float32)
    assert ring.peek_newest(out) == 0  # nothing written yet
    ring.write(np.arange(1, 3, dtype=np.float32))
    assert ring.peek_newest(out) == 2 and out[:2].tolist() == [1, 2]  # fewer than asked for
    ring.write(np.arange(3, 12, dtype=np.float32))  # 11 samples through 8 slots: the newest wrap
    assert ring.peek_newest(out) == 3 and out.tolist() == [9, 10, 11]
    assert ring.read_index == 0  # nothing consumed: the consumer still reads from where it was
    first, n = ring.read_into(np.empty(8, np.float32))
    assert (first, n) == (3, 8)  # the overwrite policy skipped what the producer overwrote, as before
