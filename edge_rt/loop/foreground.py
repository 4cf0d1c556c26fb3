"""Where a talker louder than the background starts, in an utterance the background opened.

In a room of other talkers (babble) the VAD hears speech from the first sample, so an utterance opens on the
background and the person speaking to the device is only its later, louder part. Whisper given the whole of
it can call it no speech, or be so unsure that the unsure gate drops it: at 5 dB babble four of the twelve
English clips came back empty (README, Noise), while the same audio from where the person starts was heard.
:func:`foreground_start` finds that point from the level alone: the first moment the utterance's smoothed
level comes within ``drop_db`` of its loudest second. The loop decodes from there only when the whole
utterance gave no words (``recognize``), so speech that was heard is never cut.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.stages.gain import frame_rms
from edge_rt.units import SAMPLE_RATE

__all__ = ["ForegroundOptions", "foreground_start"]


@dataclass(frozen=True)
class ForegroundOptions:
    """When and how an utterance that gave no words is decoded again from where its loudest talker starts."""

    min_s: float = 3.0  # shorter utterances are not tried again (too little background before a talker to trim)
    frame_ms: int = 100  # level frames
    smooth_s: float = 1.0  # the level is a moving average over this long (words and their gaps even out)
    # The talker starts where the smoothed level first comes this close to its maximum. Chosen with
    # tools/tune_foreground.py on generated audio (the recipe's voices and calibration sentences: a talker after
    # 1-3 s of 4-talker babble at 5/10 dB, and babble alone), two sets of 16 and 24 talker items, over 3-6 dB:
    # empty items 4 -> 3 and 10 -> 8 at 4 dB (6 dB: 4 and 7; 3 dB: 6 of 24 but WER 52.8 -> 54.3 %), WER
    # 36.6 -> 35.1 % and 52.8 -> 47.2 %, no text from any of the 40 babble-alone items at any setting.
    # Not chosen on the real clips (the noisy eval reports on those: README, Noise).
    drop_db: float = 4.0
    pad_s: float = 0.3  # kept before that point (the level rises over a word's onset)
    min_cut_s: float = 1.0  # trimming less than this is not worth a second decode

    def __post_init__(self):
        if self.frame_ms <= 0 or self.smooth_s * 1000 < self.frame_ms:
            raise ValueError(f"need frame_ms > 0 and smooth_s >= one frame, got {self.frame_ms} ms, {self.smooth_s} s")
        if self.drop_db <= 0 or self.pad_s < 0 or self.min_cut_s <= 0 or self.min_s <= 0:
            raise ValueError("drop_db, min_cut_s and min_s must be > 0 and pad_s >= 0, got "
                             f"{self.drop_db}, {self.min_cut_s}, {self.min_s}, {self.pad_s}")


def foreground_start(audio: np.ndarray, options: ForegroundOptions = ForegroundOptions()) -> int | None:
    """The sample of float32 16 kHz ``audio`` from which its loudest talker speaks; None: nothing to trim
    (too short, or the loud part starts within ``min_cut_s`` of the beginning)."""
    o = options
    frame = o.frame_ms * SAMPLE_RATE // 1000
    n = len(audio) // frame
    if len(audio) < o.min_s * SAMPLE_RATE or n < 2:
        return None
    power = np.square(frame_rms(audio, frame))
    k = max(1, int(round(o.smooth_s * 1000 / o.frame_ms)))
    smooth = np.convolve(power, np.ones(k) / k, mode="same") + 1e-20
    level = 10.0 * np.log10(smooth)
    first = int(np.argmax(level >= level.max() - o.drop_db))
    start = max(0, first * frame - int(o.pad_s * SAMPLE_RATE))
    return start if start >= o.min_cut_s * SAMPLE_RATE else None
