"""Where a turn's translated speech starts to sound: the near-silence a synthesizer puts before it is not played.

Piper begins a sentence with silence: on the calibration recipe's 122 English sentences (generated text, not the
speech set) the first sample louder than -60 dBFS comes 36 ms after the first sample at the median (18-57 ms from
the 10th to the 90th percentile, up to 222 ms); espeak-ng's Portuguese at once at the median (39 ms at the 90th
percentile). The listener waits through that silence after the end of their sentence as through any other delay,
so the first clause of each utterance's speech starts ``keep_ms`` before its first sample louder than
``below_dbfs`` (:func:`sound_onset`). Later clauses keep theirs: between sentences it is the voice's own rhythm.
Pure numpy; the speech queue (output.py) applies it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["OnsetOptions", "first_sound", "sound_onset"]


@dataclass(frozen=True)
class OnsetOptions:
    # A sample whose magnitude stays under this is silence to a listener: -60 dBFS (1e-3) lies 56 dB under the
    # English voice's peaks as played (~-4 dBFS). Not tuned: at -70 or -50 dBFS the first sound moves by at most
    # 4 ms at the median on the same 122 sentences (33 and 40 ms).
    below_dbfs: float = -60.0
    # Kept before that first louder sample (the rise of a soft onset under the limit). Not tuned.
    keep_ms: float = 5.0

    def __post_init__(self):
        if not self.below_dbfs < 0:
            raise ValueError(f"OnsetOptions.below_dbfs must be under 0 dBFS, got {self.below_dbfs}")
        if not 0 <= self.keep_ms <= 100:
            raise ValueError(f"OnsetOptions.keep_ms must be in 0..100, got {self.keep_ms}")

    def keep_samples(self, rate: int) -> int:
        """``keep_ms`` in samples at ``rate`` Hz."""
        return int(round(self.keep_ms * rate / 1000))


def first_sound(samples: np.ndarray, below_dbfs: float = OnsetOptions.below_dbfs) -> int:
    """The index of the first of ``samples`` (float, [-1, 1]) louder than ``below_dbfs``; 0 when none is."""
    loud = np.abs(samples) > 10.0 ** (below_dbfs / 20.0)
    return int(np.argmax(loud)) if len(loud) else 0  # argmax of all False is 0 too


def sound_onset(samples: np.ndarray, rate: int, options: OnsetOptions = OnsetOptions()) -> int:
    """The index from which ``samples`` (float, [-1, 1], at ``rate`` Hz) are played: ``keep_ms`` before the first
    sample louder than ``below_dbfs``; 0 when none is (nothing is cut from audio that never sounds)."""
    return max(0, first_sound(samples, options.below_dbfs) - options.keep_samples(rate))
