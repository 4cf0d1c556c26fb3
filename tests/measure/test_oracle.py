"""The bench's oracle: speech regions of the VAD over a whole clip, as silero-vad's get_speech_timestamps makes them."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.measure.bench import oracle_end
from edge_rt.measure.oracle import OracleOptions, speech_regions, speech_span
from edge_rt.units import SAMPLE_RATE, VAD_FRAME


def _p(*runs: tuple[float, int]) -> np.ndarray:
    """Per-frame probabilities from (value, frames) runs."""
    return np.concatenate([np.full(n, v, np.float32) for v, n in runs])


def test_a_short_blip_after_the_speech_is_not_speech():
    # 320 ms of speech, 160 ms of silence, a 96 ms blip (a breath, a click): one region, the blip dropped
    probs = _p((0.1, 3), (0.9, 10), (0.2, 5), (0.86, 3), (0.1, 4))
    assert speech_regions(probs) == [(3, 13)]
    assert speech_span(probs, len(probs) * VAD_FRAME) == (3 * VAD_FRAME, 13 * VAD_FRAME)


def test_a_gap_shorter_than_min_silence_is_closed_and_the_whole_counts():
    # a 64 ms dip inside speech joins the two runs; the 96 ms tail after it belongs to the speech
    probs = _p((0.1, 2), (0.9, 10), (0.3, 2), (0.7, 3), (0.1, 4))
    assert speech_regions(probs) == [(2, 17)]
    # a 128 ms gap does not: the tail alone is shorter than 250 ms
    probs = _p((0.1, 2), (0.9, 10), (0.3, 4), (0.7, 3), (0.1, 4))
    assert speech_regions(probs) == [(2, 12)]


def test_the_threshold_is_inclusive_and_regions_under_250_ms_are_dropped():
    assert OracleOptions().min_speech_ms == 250
    assert speech_regions(_p((0.5, 8))) == [(0, 8)]  # 256 ms at exactly the threshold
    assert speech_regions(_p((0.5, 7))) == []  # 224 ms
    assert speech_regions(_p((0.49, 20))) == []


def test_only_blips_is_no_speech():
    probs = _p((0.1, 5), (0.9, 2), (0.1, 10), (0.9, 3), (0.1, 5))
    assert speech_span(probs, len(probs) * VAD_FRAME) is None


def test_options_are_checked():
    with pytest.raises(ValueError):
        OracleOptions(threshold=1.5)
    with pytest.raises(ValueError):
        OracleOptions(min_speech_ms=-1)


def test_en_jfk_ends_at_its_last_word_not_at_the_breath_after_it(vad, speech_manifest, speech_dir):
    """The clip the bench failed in every run before 2026-12-05: its last frame at p >= 0.5 is a 70 ms blip
    0.35 s after "... for your country", on which the loop rightly says nothing."""
    by_id = {m["id"]: m for m in speech_manifest}
    audio = read_audio(speech_dir / by_id["en_jfk"]["audio"])
    probs = vad.probabilities(audio)
    last_frame_end = (np.flatnonzero(probs >= 0.5)[-1] + 1) * VAD_FRAME
    end = oracle_end(vad, audio)
    assert last_frame_end >= 10.9 * SAMPLE_RATE  # the blip
    assert 10.4 * SAMPLE_RATE <= end <= 10.7 * SAMPLE_RATE, end / SAMPLE_RATE
    # the speech before it is untouched: the oracle's region ends where a run of speech frames ends
    assert probs[end // VAD_FRAME - 1] >= 0.5 and probs[end // VAD_FRAME] < 0.5
