"""More pre-roll in noise: an utterance that opens out of noise starts further back.

Under steady noise a soft first syllable stays under the VAD's threshold, so the endpointer opens
the utterance late (in the noisy eval's pink 5 dB mixes 32-448 ms after it opens on the clean clip)
and its pre-roll (``EndpointOptions.preroll_ms``) starts inside the first word: Whisper then loses
it, or calls the whole utterance no speech (en_fleurs_luna). Out of quiet the VAD opens on time and
a longer pre-roll only adds room tone (a longer one for every utterance emptied en_fleurs_luna live:
see the README, Noise). So the start moves back only when the speech that opened the utterance
stands less than ``below_db`` above the audio before it. Pure numpy over the capture history's
samples, once per utterance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.stages.gain import frame_rms
from edge_rt.units import SAMPLE_RATE


@dataclass(frozen=True)
class NoisyPrerollOptions:
    extra_ms: int = 128  # added before the endpointer's start (192 -> 320 ms of pre-roll)
    below_db: float = 20.0  # when the opening speech stands less than this above the audio before it
    noise_s: float = 1.0  # the audio before the start that measures the noise (its median 20-ms frame)
    min_noise_s: float = 0.2  # less audio than this since the previous utterance: nothing is measured, no extra

    def __post_init__(self):
        if not self.below_db > 0:
            raise ValueError(f"NoisyPrerollOptions.below_db must be above 0 dB, got {self.below_db}")
        if not 0 < self.extra_ms <= 1000:
            raise ValueError(f"NoisyPrerollOptions.extra_ms must be in 1..1000, got {self.extra_ms}")
        if not 0 < self.min_noise_s <= self.noise_s:
            raise ValueError(f"NoisyPrerollOptions needs 0 < min_noise_s <= noise_s, got {self.min_noise_s} "
                             f"and {self.noise_s}")


def opening_snr_db(before: np.ndarray, opening: np.ndarray) -> float:
    """dB between the loudest 20-ms frame of ``opening`` (the speech that opened the utterance) and the median
    frame of ``before`` (the audio before it); +inf when ``before`` is digital silence, NaN when either holds
    no whole frame."""
    noise, speech = frame_rms(before), frame_rms(opening)
    if len(noise) == 0 or len(speech) == 0:
        return float("nan")
    floor = float(np.median(noise))
    if floor <= 0.0:
        return float("inf")
    return float(20.0 * np.log10(max(float(speech.max()), 1e-10) / floor))


def noisy_start(history, start: int, opened: int, now: int, floor: int, options: NoisyPrerollOptions) -> int:
    """The utterance's first sample: ``start`` (the endpointer's, pre-roll included), or ``extra_ms`` earlier
    (never before ``floor``, the previous utterance's end) when the speech from ``opened`` (its first speech
    sample) to ``now`` stands less than ``below_db`` above the ``noise_s`` before ``start``."""
    o = options
    lo = max(floor, start - int(o.noise_s * SAMPLE_RATE))
    if start - lo < o.min_noise_s * SAMPLE_RATE:
        return start
    snr = opening_snr_db(history.slice(lo, start), history.slice(opened, now))
    if not snr < o.below_db:  # NaN (nothing to measure) and quiet rooms keep the start
        return start
    return max(floor, start - o.extra_ms * SAMPLE_RATE // 1000)
