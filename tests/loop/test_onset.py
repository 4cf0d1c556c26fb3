"""sound_onset: where a turn's translated speech starts to sound, on made-up signals and on the real Piper voice."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.backends.factory import OrtEngines
from edge_rt.loop.onset import OnsetOptions, sound_onset
from edge_rt.stages.tts.voice import Tts, TtsOptions

RATE = 22050


def _silence_then_tone(silent: int, level_dbfs: float = -80.0) -> np.ndarray:
    """``silent`` samples at ``level_dbfs`` (hiss under the limit), then a -6 dBFS tone."""
    rng = np.random.default_rng(0)
    hiss = rng.uniform(-1, 1, silent).astype(np.float32) * 10 ** (level_dbfs / 20)
    tone = (0.5 * np.sin(2 * np.pi * 220 * np.arange(RATE // 10) / RATE)).astype(np.float32)
    return np.concatenate([hiss, tone])


def test_the_speech_starts_keep_ms_before_its_first_sound():
    audio = _silence_then_tone(882)  # 40 ms of hiss at -80 dBFS
    first_loud = 882 + 1  # sin(0) = 0: the tone's first sample is silent, its second is not
    assert sound_onset(audio, RATE) == first_loud - round(0.005 * RATE)
    assert sound_onset(audio, RATE, OnsetOptions(keep_ms=0)) == first_loud


def test_nothing_is_cut_from_audio_that_sounds_at_once_or_never():
    assert sound_onset(_silence_then_tone(50), RATE) == 0  # the sound begins within keep_ms
    assert sound_onset(np.full(RATE, 1e-4, np.float32), RATE) == 0  # -80 dBFS throughout: left as it is
    assert sound_onset(np.zeros(0, np.float32), RATE) == 0


def test_the_limit_is_what_counts_as_sound():
    audio = _silence_then_tone(882, level_dbfs=-55.0)  # hiss over -60 dBFS is sound
    assert sound_onset(audio, RATE) == 0
    assert sound_onset(audio, RATE, OnsetOptions(below_dbfs=-50.0)) == 883 - round(0.005 * RATE)


@pytest.mark.parametrize("kw", [{"below_dbfs": 0.0}, {"keep_ms": -1.0}, {"keep_ms": 101.0}])
def test_options_refuse_what_cannot_be_a_limit(kw):
    with pytest.raises(ValueError, match="OnsetOptions"):
        OnsetOptions(**kw)


def test_piper_starts_its_first_clause_with_silence_that_is_not_played(default_pack):
    """The real English voice (default pack): its first streamed chunk opens with tens of ms under -60 dBFS."""
    tts = Tts.from_pack(default_pack, TtsOptions(deterministic=True), engines=OrtEngines(default_pack))
    for sentence in ("He also smells everything that comes in the water.", "Unfortunately, it is difficult."):
        first = next(iter(tts.clauses(sentence, "en")))
        start = sound_onset(first.samples, first.sample_rate)
        assert 0.015 < start / first.sample_rate < 0.1, sentence  # 36 ms at the median of 122 generated sentences
        assert np.max(np.abs(first.samples[:start])) <= 1e-3  # all that is left out is under -60 dBFS
        keep = round(0.005 * first.sample_rate)
        assert abs(first.samples[start + keep]) > 1e-3  # and the sound begins there
