"""RingSink: what it plays goes into its tap (after ducking), flush drops the unplayed rest, marks fire once."""

import numpy as np

from edge_rt.audio.sinks import DUCK_GAIN, PlaybackTap, RingSink

S = 1_000_000_000
RATE = 16000


def _ramp(n: int, start: float = 1.0) -> np.ndarray:
    return (start + np.arange(n)).astype(np.float32) / 1000


def test_tap_records_what_was_played_with_its_time():
    sink = RingSink(RATE, capacity=1024)
    sink.write(_ramp(200))
    out = np.empty(160, np.float32)
    sink.consume(out, 7 * S)
    np.testing.assert_array_equal(out, _ramp(160))
    sink.consume(out, 7 * S + 10_000_000)  # 40 samples left, then silence (underrun)
    np.testing.assert_array_equal(out[:40], _ramp(40, 161))
    np.testing.assert_array_equal(out[40:], 0)
    first, got = sink.tap.ring.read(320)
    assert first == 0
    np.testing.assert_array_equal(got[:200], _ramp(200))
    np.testing.assert_array_equal(got[200:], 0)
    assert sink.tap.clock.ns(160) == 7 * S + 10_000_000  # the second buffer's first sample
    assert sink.tap.clock.index(7 * S + 5_000_000) == 80


def test_duck_scales_the_played_samples_and_the_tap_sees_them_scaled():
    sink = RingSink(RATE, capacity=1024)
    sink.write(np.ones(320, np.float32))
    out = np.empty(160, np.float32)
    sink.duck(True)
    sink.consume(out, 0)
    np.testing.assert_allclose(out, DUCK_GAIN)
    sink.duck(False)
    sink.consume(out, S // 100)
    np.testing.assert_allclose(out, 1.0)
    _, got = sink.tap.ring.read(320)
    np.testing.assert_allclose(got, np.r_[np.full(160, DUCK_GAIN), np.ones(160)])


def test_flush_drops_everything_unplayed_and_its_marks():
    sink = RingSink(RATE, capacity=4096)
    fired = []
    sink.write(np.ones(100, np.float32))
    sink.mark(lambda t: fired.append(("second", t)))
    sink.write(np.ones(3000, np.float32))
    sink.flush()
    sink.write(np.full(50, 2.0, np.float32))  # written after the flush: played
    assert sink.pending() == 3150  # the callback has not run yet
    out = np.empty(160, np.float32)
    sink.consume(out, S)
    np.testing.assert_array_equal(out[:50], 2.0)
    np.testing.assert_array_equal(out[50:], 0)
    assert fired == [] and sink.pending() == 0


def test_marks_fire_at_the_time_their_sample_is_heard():
    sink = RingSink(RATE, capacity=1024)
    fired = []
    sink.write(np.ones(100, np.float32))
    sink.mark(fired.append)
    sink.write(np.ones(100, np.float32))
    sink.consume(np.empty(160, np.float32), S)
    assert fired == [S + 100 * S // RATE]


def test_tap_keeps_the_newest_seconds():
    tap = PlaybackTap(RATE, seconds=1)
    assert tap.ring.capacity >= RATE
    for k in range(10):
        tap.record(np.full(RATE // 2, k, np.float32), k * S // 2)
    assert tap.clock.index(9 * S // 2) == 9 * RATE // 2
