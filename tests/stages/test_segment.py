"""Segmentation of per-frame probabilities: pure numbers, no audio."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.stages.segment import SegmentOptions, speech_segments
from edge_rt.units import VAD_FRAME

OPTS = SegmentOptions(min_speech_ms=96, min_silence_ms=160, pad_ms=0, max_speech_s=2.0)


def _probs(pattern: str) -> np.ndarray:
    """'1' = a speech frame (p=0.9), '0' = silence (p=0.05)."""
    return np.array([0.9 if c == "1" else 0.05 for c in pattern], np.float32)


def test_one_segment():
    p = _probs("000111111110000000")
    segs = speech_segments(p, len(p) * VAD_FRAME, OPTS)
    assert [(s.start // VAD_FRAME, s.end // VAD_FRAME) for s in segs] == [(3, 11)]


def test_short_gap_does_not_split_long_gap_does():
    p = _probs("0111110011111000001111100000")
    segs = speech_segments(p, len(p) * VAD_FRAME, OPTS)
    assert [(s.start // VAD_FRAME, s.end // VAD_FRAME) for s in segs] == [(1, 13), (18, 23)]


def test_blips_are_dropped():
    p = _probs("00010000000")
    assert speech_segments(p, len(p) * VAD_FRAME, OPTS) == []


def test_long_speech_is_split_within_the_limit():
    p = _probs("1" * 200)
    p[45] = 0.6  # the least speech-like frame in the split window
    segs = speech_segments(p, len(p) * VAD_FRAME, OPTS)
    max_frames = int(OPTS.max_speech_s * 1000 / 32)
    assert all((s.end - s.start) // VAD_FRAME <= max_frames for s in segs)
    assert segs[0].end // VAD_FRAME == 45
    assert segs[-1].end == 200 * VAD_FRAME
    assert all(a.end == b.start for a, b in zip(segs, segs[1:]))  # nothing lost between pieces


def test_padding_never_overlaps_and_stays_in_bounds():
    p = _probs("0011100000111000")
    n = len(p) * VAD_FRAME
    segs = speech_segments(p, n, SegmentOptions(min_speech_ms=64, min_silence_ms=96, pad_ms=300))
    assert len(segs) == 2
    assert segs[0].start == 0 and segs[-1].end == n
    assert segs[0].end <= segs[1].start


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="threshold"):
        SegmentOptions(threshold=1.5)
