"""The simulated loudspeaker path (audio/echo_path.py): what a sink played, heard again by the capture,
``gain_db`` down and ``delay_ms`` late, read through the sink's tap and the two clocks."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.echo_path import EchoPath, LoopBack
from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import PlaybackTap
from edge_rt.units import SAMPLE_RATE

T0 = 10**12


def test_the_playback_comes_back_late_and_quieter(speech_dir):
    played = read_audio(speech_dir / "en_jfk.wav")[: 2 * SAMPLE_RATE]
    tap = PlaybackTap(SAMPLE_RATE)
    ns = lambda i: T0 + i * 1_000_000_000 // SAMPLE_RATE  # noqa: E731
    for i in range(0, len(played), 320):  # the sink's callback, 20 ms at a time
        tap.record(played[i : i + 320], ns(i))
    path = LoopBack(tap, EchoPath(gain_db=-6.0, delay_ms=40))
    d = 40 * SAMPLE_RATE // 1000
    mic = np.full(320, 0.01, np.float32)
    heard = np.concatenate([path.add(mic, ns(i)) for i in range(d, len(played), 320)])  # capture blocks in order
    want = 0.01 + 10 ** (-6 / 20) * played[: len(heard)]
    np.testing.assert_allclose(heard, want, atol=1e-4)  # sample-exact: the delay is in the clocks, not a guess


def test_the_path_is_validated():
    with pytest.raises(ValueError, match="gain_db"):
        EchoPath(gain_db=3.0)
    with pytest.raises(ValueError, match="delay_ms"):
        EchoPath(delay_ms=-1)
