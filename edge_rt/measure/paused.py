"""A paused-speech set for ``edge-rt bench --paused``: real clips with a word-search pause inserted mid-sentence.

A person searching for a word stops for half a second or more inside a
sentence; a loop that ends the turn at every such pause speaks over them. This
module builds that case from the real clips, reproducibly:

1. the speech region runs from the start of the VAD's first speech region to
   the end of its last over the whole clip (the bench's oracle,
   :mod:`edge_rt.measure.oracle`: frames at p ≥ 0.5, regions under 250 ms
   dropped);
2. candidate word boundaries are local minima of the 10 ms log energy, inside a
   VAD speech run (p ≥ 0.5: flowing speech, not an existing pause), at least
   ``edge_ms`` from both ends of the speech region and ``min_depth_db`` below
   the speech's loud level (90th percentile). An energy dip can also be a stop
   closure inside a word; the deepest dips are word gaps more often, so the
   pause goes at one of the ``choose_from`` deepest, picked by a generator
   seeded from ``seed`` and the clip id (the same set on every run and order);
3. the pause is filled with the clip's own quietest background (its quietest
   ``fill_window_ms``, tiled with random offsets and short cross-fades), faded
   in and out at a zero crossing, so the VAD and ASR see room tone, not digital
   zeros.

Each :class:`PausedClip` records where its pauses are and where the real final
end of speech now lies (the oracle end shifted by the pauses before it).
Pure numpy; the VAD is passed in (anything with ``probabilities(audio)``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from edge_rt.measure.oracle import OracleOptions, speech_span
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

__all__ = ["PauseOptions", "PausedClip", "pause_candidates", "room_tone", "insert_pauses", "paused_clip"]

ENERGY_HOP = SAMPLE_RATE // 100  # 160 samples: 10 ms energy frames
DIGITAL_SILENCE = 1e-10  # mean power (-100 dBFS): below any microphone's noise floor, i.e. padding
FALLBACK_DBFS = -75.0  # white noise for a clip with no background at all: a quiet room through a headset mic
SPEECH_THRESHOLD = OracleOptions().threshold  # 0.5: a frame inside flowing speech, as the oracle's


@dataclass(frozen=True)
class PauseOptions:
    # 600 ms: a word-search pause ("uh ... the word") is commonly 0.5-1 s; 600 ms is twice the loop's
    # 288 ms hangover and longer than OpenAI Realtime's 500 ms default end-of-turn silence.
    pause_ms: int = 600
    pauses: int = 1  # pauses per clip (the clips are one sentence each; one pause is the case to pass)
    # 500 ms: keeps the pause away from the first and last word (a pause there is a late start or an end).
    edge_ms: int = 500
    # 15 dB below the speech's 90th-percentile level: on the English clips (not tuned on the scored
    # results: bench reports turn-taking, this only places pauses) word gaps dip 20-50 dB, vowels do not.
    min_depth_db: float = 15.0
    choose_from: int = 3  # the seeded pick is among the N deepest dips (deeper = a word gap more often)
    min_gap_ms: int = 1000  # between two pauses of one clip
    seed: int = 0
    fill_window_ms: int = 200  # the quietest stretch of the clip used as room tone
    fade_ms: int = 5  # fade in/out of the fill and cross-fade between its tiles (no clicks)

    def __post_init__(self):
        if self.pause_ms <= 0 or self.pauses < 1 or self.choose_from < 1:
            raise ValueError(f"pause_ms must be > 0, pauses and choose_from >= 1; got {self.pause_ms}, "
                             f"{self.pauses}, {self.choose_from}")
        if self.edge_ms < 0 or self.min_gap_ms < 0 or self.fill_window_ms < 2 * self.fade_ms or self.fade_ms < 1:
            raise ValueError("edge_ms and min_gap_ms must be >= 0, fade_ms >= 1 and fill_window_ms >= 2 * fade_ms")

    @property
    def pause_samples(self) -> int:
        return self.pause_ms * SAMPLE_RATE // 1000


@dataclass(frozen=True)
class PausedClip:
    """One clip with pauses inserted. Sample indices refer to ``audio`` (16 kHz float32)."""

    id: str
    audio: np.ndarray
    pauses: tuple[tuple[int, int], ...]  # [start, end) of each inserted pause, in order
    speech_start: int  # first speech sample (the VAD oracle)
    final_end: int  # the real final end of speech: the original oracle end + the pauses before it
    source_points: tuple[int, ...]  # where each pause was inserted, as sample indices of the original clip
    fill_dbfs: float  # level of the fill (the clip's quietest background)

    def in_pause(self, sample: int, slack: int = 0) -> bool:
        """Whether ``sample`` lies inside an inserted pause (widened by ``slack`` samples on both sides)."""
        return any(a - slack <= sample < b + slack for a, b in self.pauses)

    def as_dict(self) -> dict:
        s = lambda n: round(n / SAMPLE_RATE, 3)  # noqa: E731
        return {"pauses_s": [[s(a), s(b)] for a, b in self.pauses], "speech_start_s": s(self.speech_start),
                "final_end_s": s(self.final_end), "fill_dbfs": round(self.fill_dbfs, 1)}


def _log_energy(audio: np.ndarray) -> np.ndarray:
    """dBFS of each 10 ms frame, float64 [len(audio) // ENERGY_HOP]."""
    n = len(audio) // ENERGY_HOP
    frames = audio[: n * ENERGY_HOP].astype(np.float64).reshape(n, ENERGY_HOP)
    return 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)


def pause_candidates(audio: np.ndarray, probs: np.ndarray, options: PauseOptions = PauseOptions()
                     ) -> list[tuple[int, float]]:
    """Candidate word boundaries: ``(sample index, depth dB below the speech level)``, deepest first.

    Args:
        audio: float32 mono 16 kHz, shape [n].
        probs: the VAD's per-frame probabilities of ``audio`` (frame i = samples [512 i, 512 (i + 1))).
    """
    region = speech_span(probs, len(audio))  # the bench's oracle
    if region is None:
        return []
    s0, s1 = region
    db = _log_energy(audio)
    smooth = np.convolve(db, np.ones(3) / 3, mode="same")  # 30 ms: one dip, not its ripples
    loud = float(np.percentile(db[s0 // ENERGY_HOP : max(s0 // ENERGY_HOP + 1, s1 // ENERGY_HOP)], 90))
    edge = options.edge_ms * SAMPLE_RATE // 1000
    lo, hi = (s0 + edge) // ENERGY_HOP, (s1 - edge) // ENERGY_HOP
    half = 6  # a local minimum over +-60 ms (shorter than a syllable: each gap keeps its own dip)
    out = []
    for i in range(max(lo, half), min(hi, len(smooth) - half)):
        window = smooth[i - half : i + half + 1]
        if smooth[i] != window.min() or loud - smooth[i] < options.min_depth_db:
            continue
        centre = i * ENERGY_HOP + ENERGY_HOP // 2
        if probs[min(centre // VAD_FRAME, len(probs) - 1)] < SPEECH_THRESHOLD:
            continue  # already a pause the VAD hears: not a boundary inside flowing speech
        out.append((centre, float(loud - smooth[i])))
    return sorted(out, key=lambda c: (-c[1], c[0]))


def _choose(candidates: list[tuple[int, float]], options: PauseOptions, rng: np.random.Generator) -> list[int]:
    """Up to ``options.pauses`` points, each among the deepest remaining, at least ``min_gap_ms`` apart."""
    gap = options.min_gap_ms * SAMPLE_RATE // 1000
    left, chosen = list(candidates), []
    while left and len(chosen) < options.pauses:
        pick = left[int(rng.integers(min(options.choose_from, len(left))))][0]
        chosen.append(pick)
        left = [c for c in left if abs(c[0] - pick) >= gap]
    return sorted(chosen)


def room_tone(audio: np.ndarray, n: int, options: PauseOptions, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """``n`` samples of the clip's quietest background and its level in dBFS.

    The quietest ``fill_window_ms`` stretch (10 ms steps) is tiled with random circular offsets,
    neighbouring tiles cross-faded over ``fade_ms``; the whole is faded in and out over ``fade_ms``.
    """
    win = options.fill_window_ms * SAMPLE_RATE // 1000
    fade = options.fade_ms * SAMPLE_RATE // 1000
    if len(audio) < win:
        raise ValueError(f"the clip is {len(audio)} samples long, shorter than the room-tone window ({win})")
    power = np.convolve(audio.astype(np.float64) ** 2, np.ones(win) / win, mode="valid")[::ENERGY_HOP]
    # Digital silence (padding some clips carry) is not a room: skip windows holding a 10 ms frame of it.
    frames = 10 ** (_log_energy(audio) / 10)
    k = win // ENERGY_HOP
    if len(frames) >= k:
        floor = np.lib.stride_tricks.sliding_window_view(frames, k).min(axis=1)
        m = min(len(floor), len(power))
        live = np.flatnonzero(floor[:m] > DIGITAL_SILENCE)
    else:
        live = np.zeros(0, np.int64)
    if live.size:
        start = int(live[np.argmin(power[live])]) * ENERGY_HOP
        bed = audio[start : start + win].astype(np.float32)
    else:  # nothing but digital silence: low-level white noise instead
        bed = rng.normal(0.0, 10 ** (FALLBACK_DBFS / 20), win).astype(np.float32)
    out = np.zeros(n + fade, np.float32)
    ramp = np.sin(np.linspace(0, np.pi / 2, fade, dtype=np.float32)) ** 2
    pos = 0
    while pos < n:
        tile = np.roll(bed, int(rng.integers(win))).copy()
        tile[:fade] *= ramp
        tile[-fade:] *= ramp[::-1]
        m = min(win, len(out) - pos)
        out[pos : pos + m] += tile[:m]
        pos += win - fade
    out = out[:n]
    edge = min(fade, n // 2)
    out[:edge] *= ramp[:edge]
    out[n - edge :] *= ramp[:edge][::-1]
    return out, float(10 * np.log10(np.mean(bed.astype(np.float64) ** 2) + 1e-12))


def _zero_crossing(audio: np.ndarray, at: int, reach: int) -> int:
    """The sign change nearest ``at`` within ``reach`` samples (``at`` itself when there is none)."""
    lo, hi = max(1, at - reach), min(len(audio) - 1, at + reach)
    seg = audio[lo - 1 : hi]
    flips = np.flatnonzero(np.signbit(seg[:-1]) != np.signbit(seg[1:])) + lo
    return int(flips[np.argmin(np.abs(flips - at))]) if flips.size else at


def insert_pauses(audio: np.ndarray, points: list[int], fill: list[np.ndarray]
                  ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """``audio`` with ``fill[k]`` inserted before sample ``points[k]`` (sorted); returns it and the pause spans."""
    pieces, spans, prev, shift = [], [], 0, 0
    for p, f in zip(points, fill):
        pieces += [audio[prev:p], f]
        spans.append((p + shift, p + shift + len(f)))
        shift += len(f)
        prev = p
    pieces.append(audio[prev:])
    return np.concatenate(pieces).astype(np.float32), spans


def paused_clip(clip_id: str, audio: np.ndarray, vad, options: PauseOptions = PauseOptions()) -> PausedClip | None:
    """The paused version of one clip, or None when it has no boundary far enough inside its speech.

    Args:
        clip_id: mixed into the seed, so each clip gets its own reproducible pick.
        audio: float32 mono 16 kHz, shape [n].
        vad: the stage's VAD (``probabilities(audio) -> float32 [ceil(n / 512)]``).
    """
    probs = vad.probabilities(audio)
    region = speech_span(probs, len(audio))  # the bench's oracle
    candidates = pause_candidates(audio, probs, options)
    if region is None or not candidates:
        return None
    rng = np.random.default_rng([options.seed, zlib.crc32(clip_id.encode())])
    points = [_zero_crossing(audio, p, ENERGY_HOP // 2) for p in _choose(candidates, options, rng)]
    fills, level = [], 0.0
    for _ in points:
        f, level = room_tone(audio, options.pause_samples, options, rng)
        fills.append(f)
    out, spans = insert_pauses(audio, points, fills)
    total = sum(b - a for a, b in spans)
    return PausedClip(clip_id, out, tuple(spans), region[0], region[1] + total, tuple(points), level)
