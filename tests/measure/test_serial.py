"""The serial baseline (measure/serial.py) on the default pack's real engines: timed to its reply's first sound."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.loop.options import LoopOptions
from edge_rt.measure.bench import oracle_end
from edge_rt.measure.serial import lead_ms, serial_turn
from edge_rt.pipeline import StageOptions, load_stages


def test_lead_ms_is_the_time_before_the_first_sample_over_minus_60_dbfs():
    rate = 22050
    quiet, loud = np.full(441, 5e-4, np.float32), np.full(100, 0.2, np.float32)  # 20 ms under -60 dBFS, then sound
    assert lead_ms(np.concatenate([quiet, loud]), rate) == pytest.approx(20.0)
    assert lead_ms(loud, rate) == 0.0
    assert lead_ms(quiet, rate) == 0.0  # never sounds: nothing to wait for


@pytest.mark.slow
def test_the_serial_turn_counts_piper_s_lead_as_its_listener_hears_it(default_pack, speech_dir):
    """German into English (Whisper translates), then Piper's first clause, whose near-silence a pipeline that plays
    every sample makes its listener wait through (the loop starts where it sounds and is timed there)."""
    stages = load_stages(default_pack, StageOptions(precision="int8"))
    audio = read_audio(speech_dir / "de_fleurs_sinnvoll.wav")
    turn = serial_turn(stages, audio, oracle_end(stages.vad, audio), LoopOptions(target="en"))
    assert "fair" in turn.text, turn  # "I didn't feel that way. It was not fair."
    assert 0 < turn.lead_ms < 250, turn  # Piper: 18-57 ms from the 10th to the 90th percentile, at most 222 ms
    assert turn.latency_ms == pytest.approx(turn.wait_ms + turn.asr_ms + turn.mt_ms + turn.tts_ms + turn.lead_ms)
