"""Noisy versions of the real speech clips, for ``edge-rt eval --noise``.

Each clip is padded with ``pad_s`` of silence before and after (so every mix has
noise-only stretches, where any text the product writes is invented) and mixed with
one kind of noise at a given SNR:

* ``babble``: 3 or 4 OTHER clips of the speech set (any language), each levelled to
  the same speech RMS, looped from a random offset and summed: a room of talkers;
* ``pink``: 1/f noise (fan, air conditioning, distant crowd);
* ``brown``: 1/f^2 noise from ``LOW_HZ`` up (traffic-like rumble; below 20 Hz a
  microphone's high-pass removes it, and it would carry most of the power, so the
  SNR would describe sound nobody hears);
* ``music``: the build's music-like recipe (chords of harmonic tones with vibrato,
  an optional beat: :func:`edge_rt.build.calibration.audio._music`).

SNR is measured over the clean clip's speech frames only (512-sample frames whose
RMS is within 35 dB of the loudest frame, the calibration set's speech label):
``10 log10(mean(clean^2) / mean(noise^2))`` over those samples, so a clip with long
pauses is not mixed hotter than one without. A mix whose peak would pass
``PEAK`` is scaled down as a whole (speech and noise together: the SNR stays).

Everything is a pure function of the seed, the clip id and the noise kind (the
same noise at every SNR of a clip, so SNRs differ only in level), via a
``numpy.random.Generator`` seeded from ``SeedSequence([seed, crc32(id), kind])``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import numpy as np

from edge_rt.units import SAMPLE_RATE, VAD_FRAME

__all__ = ["NOISE_KINDS", "NoisyMix", "NoiseOptions", "make_noise", "mix_at_snr", "measured_snr_db",
           "speech_frames", "noisy_mixes"]

NOISE_KINDS = ("babble", "pink", "brown", "music")
LOW_HZ = 20.0  # colored noise starts here (a microphone's high-pass corner)
PEAK = 0.99  # a mix louder than this is scaled down as a whole


@dataclass(frozen=True)
class NoiseOptions:
    """Which mixes to make. Defaults: the issue's grid (4 kinds x 4 SNRs)."""

    kinds: tuple[str, ...] = NOISE_KINDS
    snrs_db: tuple[float, ...] = (0.0, 5.0, 10.0, 20.0)
    seed: int = 20261201
    pad_s: float = 2.0  # noise alone before and after the speech
    talkers: tuple[int, int] = (3, 4)  # babble: this many other clips, inclusive range

    def __post_init__(self):
        bad = [k for k in self.kinds if k not in NOISE_KINDS]
        if bad or not self.kinds:
            raise ValueError(f"noise kinds are {', '.join(NOISE_KINDS)}; got {list(self.kinds)}")
        if not self.snrs_db or any(not -20 <= s <= 60 for s in self.snrs_db):
            raise ValueError(f"SNRs must be in [-20, 60] dB, got {list(self.snrs_db)}")
        if not 0 <= self.pad_s <= 30:
            raise ValueError(f"pad_s must be in [0, 30] s, got {self.pad_s}")
        if not 1 <= self.talkers[0] <= self.talkers[1]:
            raise ValueError(f"talkers must be (low, high) with 1 <= low <= high, got {self.talkers}")


@dataclass(frozen=True)
class NoisyMix:
    """One clip in one noise at one SNR; all arrays float32 mono 16 kHz of the same length."""

    id: str  # "<clip id>/<kind>/<snr> dB"
    clip_id: str
    kind: str
    snr_db: float
    audio: np.ndarray = field(repr=False)  # the mix
    clean: np.ndarray = field(repr=False)  # the clean clip, zero-padded to the mix (the reference)
    speech_start: int  # sample where the clip starts in the mix (= the leading noise-only stretch)
    speech_end: int  # one past its last sample (the trailing noise-only stretch starts here)
    gain: float = 1.0  # the mix holds gain * clean (< 1 where it would have clipped); noise = audio - gain * clean


def speech_frames(clean: np.ndarray) -> np.ndarray:
    """bool per 512-sample frame (zero-padded): RMS within 35 dB of the loudest frame (the calibration
    recipe's own speech labels, build/calibration/audio.py)."""
    from edge_rt.build.calibration.audio import speech_labels

    return speech_labels(clean)


def _speech_samples(clean: np.ndarray) -> np.ndarray:
    """bool per sample: inside a speech frame of ``clean``."""
    return np.repeat(speech_frames(clean), VAD_FRAME)[: len(clean)]


def measured_snr_db(clean: np.ndarray, noise: np.ndarray) -> float:
    """SNR (dB) of ``clean`` against ``noise`` (same length) over ``clean``'s speech frames."""
    m = _speech_samples(clean)
    if not m.any():
        raise ValueError("the clean signal has no speech frame: an SNR over speech frames is undefined")
    p_s = float(np.mean(np.square(clean[m], dtype=np.float64)))
    p_n = float(np.mean(np.square(noise[m], dtype=np.float64)))
    return 10 * np.log10(p_s / max(p_n, 1e-30))


def mix_at_snr(clean: np.ndarray, noise: np.ndarray, snr_db: float) -> tuple[np.ndarray, float]:
    """(mix, gain): ``noise`` scaled so that :func:`measured_snr_db` is ``snr_db``, added to ``clean``.

    ``gain`` (<= 1) scales the whole mix when it would peak above ``PEAK`` (the SNR is kept), so
    the noise in the mix is ``mix - gain * clean``.
    """
    if clean.shape != noise.shape:
        raise ValueError(f"clean {clean.shape} and noise {noise.shape} must have the same length")
    clean64, noise64 = clean.astype(np.float64), noise.astype(np.float64)
    have = measured_snr_db(clean64, noise64)
    out = clean64 + noise64 * 10 ** ((have - snr_db) / 20)
    peak = float(np.max(np.abs(out))) if out.size else 0.0
    gain = PEAK / peak if peak > PEAK else 1.0
    return (out * gain).astype(np.float32), gain


def _colored(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    """Unit-RMS noise with power ~ 1/f^exponent from LOW_HZ up, nothing below."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1.0 / SAMPLE_RATE)
    shape = np.where(f >= LOW_HZ, 1.0 / np.maximum(f, LOW_HZ) ** (exponent / 2), 0.0)
    x = np.fft.irfft(spec * shape, n)
    return x / (np.sqrt(np.mean(x**2)) + 1e-12)


def _babble(rng: np.random.Generator, n: int, others: Sequence[np.ndarray], talkers: tuple[int, int]) -> np.ndarray:
    if len(others) < talkers[0]:
        raise ValueError(f"babble needs at least {talkers[0]} other clips, got {len(others)}")
    k = int(rng.integers(talkers[0], min(talkers[1], len(others)) + 1))
    x = np.zeros(n, np.float64)
    for i in rng.choice(len(others), size=k, replace=False):
        o = np.asarray(others[int(i)], np.float64)
        m = _speech_samples(o)
        level = np.sqrt(np.mean(o[m] ** 2)) if m.any() else np.sqrt(np.mean(o**2)) + 1e-12
        start = int(rng.integers(0, len(o)))
        x += np.resize(np.roll(o, -start), n) / level  # looped from a random offset
    return x / (np.sqrt(np.mean(x**2)) + 1e-12)


def make_noise(kind: str, rng: np.random.Generator, n: int, others: Sequence[np.ndarray] = (),
               talkers: tuple[int, int] = (3, 4)) -> np.ndarray:
    """``n`` samples of unit-RMS float64 noise of ``kind`` (``others``: the babble talkers to draw from)."""
    if kind == "babble":
        return _babble(rng, n, others, talkers)
    if kind == "pink":
        return _colored(rng, n, 1.0)
    if kind == "brown":
        return _colored(rng, n, 2.0)
    if kind == "music":
        from edge_rt.build.calibration.audio import _music  # the calibration recipe's music-like generator

        return _music(rng, n).astype(np.float64)
    raise ValueError(f"unknown noise kind {kind!r}; kinds are {', '.join(NOISE_KINDS)}")


def _rng(seed: int, clip_id: str, kind: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(clip_id.encode()),
                                                         NOISE_KINDS.index(kind)]))


def noisy_mixes(clips: Mapping[str, np.ndarray], pool: Mapping[str, np.ndarray],
                options: NoiseOptions = NoiseOptions()) -> Iterator[NoisyMix]:
    """Every clip of ``clips`` x kind x SNR (in that order), lazily.

    Args:
        clips: clip id -> float32 16 kHz audio to mix.
        pool: clip id -> audio of the whole set; babble draws from it, never the clip itself.
    """
    pad = int(round(options.pad_s * SAMPLE_RATE))
    for cid, audio in clips.items():
        clean = np.concatenate([np.zeros(pad, np.float32), np.asarray(audio, np.float32), np.zeros(pad, np.float32)])
        others = [a for k, a in sorted(pool.items()) if k != cid]
        for kind in options.kinds:
            noise = make_noise(kind, _rng(options.seed, cid, kind), len(clean), others, options.talkers)
            for snr in options.snrs_db:
                mixed, gain = mix_at_snr(clean, noise, snr)
                yield NoisyMix(f"{cid}/{kind}/{snr:g}dB", cid, kind, float(snr), mixed, clean, pad, pad + len(audio),
                               gain)
