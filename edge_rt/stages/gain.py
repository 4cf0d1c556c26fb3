"""Automatic gain before ASR: bring a quiet utterance to speech level, without inventing speech from noise.

Whisper's log-mel features are not level invariant (``(log10(mel) + 4) / 4``
after a floor 8 decades under the peak), so speech recorded far below the
level it was trained on (the FLEURS clips at -55 dBFS peak) loses words or is
judged "no speech". Each utterance is scaled once, as a whole, by

    gain = target - speech level   (dB; speech level = loud-frame RMS)

bounded three ways: at most ``max_gain_db``; never so much that a peak passes
``peak_dbfs`` (no clipping); and none at all when the loud frames stand less
than ``min_snr_db`` above the quiet ones (steady noise stays quiet, so Whisper's
no-speech rule still sees noise). It never attenuates. Pure numpy on one array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.units import SAMPLE_RATE

__all__ = ["GainOptions", "utterance_gain", "apply_gain", "frame_rms"]

FRAME = SAMPLE_RATE // 50  # 20 ms level frames


@dataclass(frozen=True)
class GainOptions:
    target_dbfs: float = -26.0  # loud-frame RMS after gain (LibriSpeech-like speech level)
    max_gain_db: float = 40.0  # never more (noise under quiet speech is not raised to a roar)
    peak_dbfs: float = -1.0  # no sample is pushed above this
    min_snr_db: float = 12.0  # loud frames must stand this far above quiet ones, or no gain
    loud_percentile: float = 90.0  # the "speech level" frame
    quiet_percentile: float = 10.0  # the "noise floor" frame

    def __post_init__(self):
        if not -60 <= self.target_dbfs < 0:
            raise ValueError(f"GainOptions.target_dbfs must be in [-60, 0) dBFS, got {self.target_dbfs}")
        if not 0 <= self.max_gain_db <= 80:
            raise ValueError(f"GainOptions.max_gain_db must be in [0, 80] dB, got {self.max_gain_db}")
        if not self.peak_dbfs <= 0:
            raise ValueError(f"GainOptions.peak_dbfs must be <= 0 dBFS, got {self.peak_dbfs}")
        if not 0 <= self.quiet_percentile < self.loud_percentile <= 100:
            raise ValueError(f"GainOptions percentiles must satisfy 0 <= quiet ({self.quiet_percentile}) < loud "
                             f"({self.loud_percentile}) <= 100")


def _db(x: float) -> float:
    return 20.0 * np.log10(max(x, 1e-10))


def frame_rms(audio: np.ndarray, frame: int = FRAME) -> np.ndarray:
    """RMS (float64) of each whole ``frame``-sample frame of ``audio``; empty for less than one frame."""
    n = len(audio) // frame
    return np.sqrt(np.mean(np.square(audio[: n * frame].reshape(n, frame), dtype=np.float64), axis=1))


def utterance_gain(audio: np.ndarray, options: GainOptions = GainOptions()) -> float:
    """Linear gain (>= 1) for float32 mono ``audio``; 1.0 for audio shorter than one 20 ms frame."""
    rms = frame_rms(audio)
    if len(rms) == 0:
        return 1.0
    loud, quiet = np.percentile(rms, [options.loud_percentile, options.quiet_percentile])
    if _db(loud) - _db(quiet) < options.min_snr_db:
        return 1.0  # steady noise (or steady tone): level is not speech
    peak = float(np.max(np.abs(audio)))
    gain_db = min(options.target_dbfs - _db(loud), options.max_gain_db, options.peak_dbfs - _db(peak))
    return float(10 ** (gain_db / 20)) if gain_db > 0 else 1.0


def apply_gain(audio: np.ndarray, options: GainOptions = GainOptions()) -> np.ndarray:
    """``audio`` scaled by :func:`utterance_gain` (a new array when the gain is not 1)."""
    g = utterance_gain(audio, options)
    return audio if g == 1.0 else (audio * np.float32(g)).astype(np.float32, copy=False)
