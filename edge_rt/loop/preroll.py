"""Where an utterance starts: further back out of noise, and out of quiet where its first sound does.

Under steady noise a soft first syllable stays under the VAD's threshold, so the endpointer opens
the utterance late (in the noisy eval's pink 5 dB mixes 32-448 ms after it opens on the clean clip)
and its pre-roll (``EndpointOptions.preroll_ms``) starts inside the first word: Whisper then loses
it, or calls the whole utterance no speech (en_fleurs_luna). Out of quiet the VAD opens on time and
a longer pre-roll only adds room tone (a longer one for every utterance emptied en_fleurs_luna live:
see the README, Noise). So the start moves back only when the speech that opened the utterance
stands less than ``below_db`` above the audio before it (``noisy_start``).

Out of quiet the VAD mostly opens on time, but Silero scores some soft first sounds low (the whole of
"Stuff" in "Stuff it into you") and opens on the next word, so the pre-roll starts inside the first:
where the frames right before the start are sound, not room tone, the start moves back to where that
sound begins (``sound_start``), never further than ``max_ms``. Both are pure numpy over the capture
history's samples, once per utterance.
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


DIGITAL_SILENCE = 10 ** (-110 / 20)  # a 20-ms frame's RMS at or under this (-110 dBFS) is no room's sound


@dataclass(frozen=True)
class SoundStartOptions:
    above_db: float = 10.0  # a 20-ms frame this far above the room's floor is sound (the word's soft onset)
    max_ms: int = 320  # how much further back than the endpointer's start, at most
    quiet_db: float = 25.0  # only out of a quiet room: the opening speech at least this far above its floor
    noise_s: float = 1.0  # the audio before the start that measures the floor (its median 20-ms frame)
    min_noise_s: float = 0.2  # less room than this (digital silence not counted) before the start: no move

    def __post_init__(self):
        if not self.above_db > 0:
            raise ValueError(f"SoundStartOptions.above_db must be above 0 dB, got {self.above_db}")
        if not 0 < self.max_ms <= 1000:
            raise ValueError(f"SoundStartOptions.max_ms must be in 1..1000, got {self.max_ms}")
        if not 0 < self.min_noise_s <= self.noise_s:
            raise ValueError(f"SoundStartOptions needs 0 < min_noise_s <= noise_s, got {self.min_noise_s} "
                             f"and {self.noise_s}")


def sound_start(history, start: int, opened: int, now: int, floor: int, options: SoundStartOptions) -> int:
    """The utterance's first sample: ``start`` (the endpointer's, pre-roll included), or, when the 20-ms frames
    just before it are sound (``above_db`` over the median frame of the ``noise_s`` before it), the start of the
    first frame back that is not, at most ``max_ms`` earlier and never before ``floor`` (the previous utterance's
    end). Only out of a quiet room (the speech from ``opened`` to ``now`` at least ``quiet_db`` above the floor):
    there a soft onset Silero scores low (a fricative, "Stuff") can begin before the pre-roll, and Whisper, given
    the word without its start, writes another word. Digital silence (a file's padding, a gated input) is no room:
    its frames are left out of the floor, and with less than ``min_noise_s`` of anything else the start stays."""
    o = options
    frame = SAMPLE_RATE // 50
    lo = max(floor, start - int(o.noise_s * SAMPLE_RATE))
    before = frame_rms(history.slice(lo, start))
    room = before[before > DIGITAL_SILENCE]
    opening = frame_rms(history.slice(opened, now))
    if len(room) * frame < o.min_noise_s * SAMPLE_RATE or len(opening) == 0:
        return start
    floor_db = 20.0 * float(np.log10(float(np.median(room))))
    if not 20.0 * np.log10(max(float(opening.max()), 1e-10)) - floor_db >= o.quiet_db:
        return start
    earliest = max(floor, start - o.max_ms * SAMPLE_RATE // 1000)
    back = frame_rms(history.slice(earliest, start)[::-1].copy())  # frames counted back from the start
    sound = 20.0 * np.log10(np.maximum(back, 1e-10)) > floor_db + o.above_db
    if len(sound) == 0 or not sound[0]:
        return start
    loud = len(sound) if sound.all() else int(np.argmin(sound))  # frames of sound right before the start
    return max(earliest, start - (loud + 1) * frame)  # and the quiet frame before them
