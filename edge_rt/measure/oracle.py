"""Where speech starts and ends in a whole clip, offline: the oracle that `bench` measures turns from.

The pack's Silero VAD scores every 32 ms frame of the whole clip; its frames are turned into speech regions
as silero-vad's own ``get_speech_timestamps`` does with its defaults: frames at or above ``threshold`` are
speech, a gap shorter than ``min_silence_ms`` inside speech is closed, and a region shorter than
``min_speech_ms`` is not speech. The oracle's end of speech is the end of the last region.

Until 2026-12-05 the end was the last frame at or above 0.5, whatever it belonged to: a 70 ms blip (p 0.86)
0.35 s after en_jfk's last word, two of 100 and 130 ms 1.2-1.6 s after zh_fleurs_1883's, and a 30 ms one 0.2 s
after en_fleurs_1938's. The loop opened an utterance on the first two and rightly said nothing, so `bench`
listed both clips as failed in most runs ("produced no speech"), and en_fleurs_1938's latency was counted
from 224 ms after its last word. Those three clips' ends moved (to 10.59, 11.39 and 10.46 s); no other
clip's start or end did.

silero-vad's function needs PyTorch (not in this project), so this is its post-processing in numpy, without
its hysteresis (a region ends below threshold - 0.15 there: here it ends below ``threshold``, where the bench's
end of speech has always been), its 30 ms padding and its maximum region length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.units import VAD_FRAME, VAD_FRAME_MS

__all__ = ["OracleOptions", "speech_regions", "speech_span"]


@dataclass(frozen=True)
class OracleOptions:
    """silero-vad's ``get_speech_timestamps`` defaults (not tuned here)."""

    threshold: float = 0.5  # a frame is speech at or above this probability
    min_speech_ms: int = 250  # a shorter region (a breath, a click) is not speech
    min_silence_ms: int = 100  # a shorter gap inside speech is closed

    def __post_init__(self):
        if not 0.0 < self.threshold < 1.0 or self.min_speech_ms < 0 or self.min_silence_ms < 0:
            raise ValueError(f"need 0 < threshold < 1 and non-negative durations, got {self}")


def speech_regions(probs: np.ndarray, options: OracleOptions = OracleOptions()) -> list[tuple[int, int]]:
    """Speech regions ``[(first frame, one past the last frame)]`` of per-frame probabilities ``probs``."""
    speech = np.asarray(probs) >= options.threshold
    edges = np.flatnonzero(np.diff(np.concatenate(([0], speech.astype(np.int8), [0]))))
    runs = list(zip(edges[0::2].tolist(), edges[1::2].tolist()))
    merged: list[list[int]] = []
    for a, b in runs:
        if merged and (a - merged[-1][1]) * VAD_FRAME_MS < options.min_silence_ms:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged if (b - a) * VAD_FRAME_MS >= options.min_speech_ms]


def speech_span(probs: np.ndarray, n_samples: int, options: OracleOptions = OracleOptions()) -> tuple[int, int] | None:
    """Samples ``[start, end)`` from the first region's start to the last region's end (``end`` at most
    ``n_samples``); None when ``probs`` hold no speech region."""
    regions = speech_regions(probs, options)
    if not regions:
        return None
    return regions[0][0] * VAD_FRAME, min(n_samples, regions[-1][1] * VAD_FRAME)
