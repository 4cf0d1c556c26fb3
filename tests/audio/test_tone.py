"""The ready tone (audio/tone.py): a sweep of the asked length and level, over the speech band, with no click."""

from __future__ import annotations

import numpy as np

from edge_rt.audio.tone import ready_tone


def test_a_sweep_of_the_asked_length_and_level_over_the_speech_band():
    for rate in (16000, 22050, 48000):
        x = ready_tone(rate, 500, -20.0)
        assert x.dtype == np.float32 and len(x) == rate // 2
        assert 10 * np.log10(np.mean(x.astype(np.float64) ** 2)) == pytest_approx(-20.0)
        assert abs(x[0]) < 1e-3 and abs(x[-1]) < 1e-3  # faded in and out: no click
        spec = np.abs(np.fft.rfft(x)) ** 2
        f = np.fft.rfftfreq(len(x), 1 / rate)
        band = spec[(f >= 200) & (f <= 6000)].sum() / spec.sum()
        assert band > 0.95, band  # its energy lies where speech (and the echo path we need) is
        # it sweeps upward: the strongest frequency of its first tenth is low, of its last tenth high
        tenth = len(x) // 10
        peak = [np.fft.rfftfreq(tenth, 1 / rate)[np.argmax(np.abs(np.fft.rfft(seg)))] for seg in (x[:tenth], x[-tenth:])]
        assert peak[0] < 500 and peak[1] > 3000, peak

def test_no_tone_is_empty():
    assert len(ready_tone(16000, 0)) == 0


def pytest_approx(v):
    import pytest

    return pytest.approx(v, abs=0.05)
