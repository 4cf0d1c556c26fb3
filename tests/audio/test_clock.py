"""CaptureClock: index <-> time through the nearest anchor, also long after newer anchors arrived."""

from edge_rt.audio.clock import ANCHORS, CaptureClock

S = 1_000_000_000


def _slow_device(clock: CaptureClock, periods: int, block: int = 320, speed: float = 0.94) -> None:
    """A device running ``speed`` x the nominal 16 kHz, anchored once per callback (its last sample)."""
    for k in range(1, periods + 1):
        clock.anchor(k * block - 1, int(k * block / 16000 / speed * S))


def test_old_indices_use_their_own_anchor_not_the_latest():
    clock = CaptureClock()
    _slow_device(clock, 500)  # 10 s of samples, 10.6 s of wall time
    t = clock.ns(16000 * 2 - 1)  # sample 2 s in: heard at 2/0.94 s
    assert abs(t - 2 / 0.94 * S) < 0.02 * S
    # Extrapolating from the latest anchor (the old behaviour) would be 8 s x 6 % = 0.5 s off.
    assert abs(clock.index(int(2 / 0.94 * S)) - 32000) <= 320


def test_newer_than_the_latest_anchor_extrapolates_at_the_nominal_rate():
    clock = CaptureClock()
    clock.anchor(999, 5 * S)
    assert clock.ns(999 + 16000) == 6 * S
    assert clock.index(6 * S) == 999 + 16000
    assert clock.ns(0) == 5 * S - 999 * S // 16000  # older than every anchor: the oldest one


def test_history_wraps_and_keeps_the_newest():
    clock = CaptureClock()
    _slow_device(clock, 3 * ANCHORS, speed=1.0)
    last = 3 * ANCHORS * 320 - 1
    for index in (last, last - 320 * (ANCHORS // 2) - 7):
        assert abs(clock.ns(index) - (index + 1) * S // 16000) <= S // 16000
        assert abs(clock.index(clock.ns(index)) - index) <= 1
