"""Speech segments from per-frame VAD probabilities (offline, whole file).

The same hysteresis as Silero's ``get_speech_timestamps``: speech starts at
``threshold``, ends after ``min_silence_ms`` below ``threshold - 0.15``.
Pure function of numbers; the live endpointer lives in ``edge_rt/loop``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.units import SAMPLE_RATE, VAD_FRAME, VAD_FRAME_MS


@dataclass(frozen=True)
class SegmentOptions:
    threshold: float = 0.5  # speech probability that opens a segment
    neg_offset: float = 0.15  # a segment closes below threshold - neg_offset
    min_speech_ms: int = 250  # shorter segments are dropped
    min_silence_ms: int = 400  # silence that ends a segment
    pad_ms: int = 200  # kept around each segment so the first and last phonemes survive
    max_speech_s: float = 28.0  # longer speech is split at the quietest frame (fits Whisper's 30 s window)

    def __post_init__(self):
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        if self.max_speech_s * 1000 <= self.min_speech_ms:
            raise ValueError("max_speech_s must be longer than min_speech_ms")


@dataclass(frozen=True)
class Segment:
    start: int  # first sample (16 kHz)
    end: int  # one past the last sample

    @property
    def start_s(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def end_s(self) -> float:
        return self.end / SAMPLE_RATE


def _frames(ms: float) -> int:
    return max(1, int(round(ms / VAD_FRAME_MS)))


def _split_long(start: int, end: int, probs: np.ndarray, max_frames: int) -> list[tuple[int, int]]:
    """Split [start, end) frames so no piece exceeds ``max_frames``, cutting at the least speech-like frame."""
    pieces = []
    while end - start > max_frames:
        lo = start + max_frames // 2
        hi = start + max_frames
        cut = lo + int(np.argmin(probs[lo:hi]))
        pieces.append((start, cut))
        start = cut
    pieces.append((start, end))
    return pieces


def speech_segments(probs: np.ndarray, n_samples: int, options: SegmentOptions = SegmentOptions()) -> list[Segment]:
    """Segments of speech, in samples, from per-frame probabilities.

    Args:
        probs: float [n_frames], one per ``VAD_FRAME`` samples.
        n_samples: length of the audio, to clip the last segment.
    """
    off = options.threshold - options.neg_offset
    min_sil, min_speech = _frames(options.min_silence_ms), _frames(options.min_speech_ms)
    raw: list[tuple[int, int]] = []
    start = None
    silence = 0
    for i, p in enumerate(probs):
        if start is None:
            if p >= options.threshold:
                start, silence = i, 0
            continue
        if p < off:
            silence += 1
            if silence >= min_sil:
                raw.append((start, i - silence + 1))
                start = None
        else:
            silence = 0
    if start is not None:
        raw.append((start, len(probs) - silence))
    max_frames = int(options.max_speech_s * 1000 / VAD_FRAME_MS)
    pad = int(options.pad_ms * SAMPLE_RATE / 1000)
    bounds = [(a * VAD_FRAME, b * VAD_FRAME) for s, e in raw if e - s >= min_speech
              for a, b in _split_long(s, e, probs, max_frames)]
    segments: list[Segment] = []
    for k, (a, b) in enumerate(bounds):
        lo = max(0, a - pad) if k == 0 else max(a - pad, (bounds[k - 1][1] + a) // 2)
        hi = min(n_samples, b + pad) if k + 1 == len(bounds) else min(b + pad, (b + bounds[k + 1][0]) // 2)
        segments.append(Segment(lo, hi))
    return segments
