"""When a transcript says too little for its speech, the utterance is decoded again in pieces (LoopOptions.split).

In noise Whisper's decode of a whole utterance can end early: at 10 dB babble en_fleurs_1728's 5-s sentence came out
as "The cabab" (greedy and beam alike), at 5 dB pink noise en_fleurs_1846's as "The aspect ratio of this format by",
while the VAD held the whole sentence (README, Noise). Whisper's own answer is a seek past the last timestamp; the
loop decodes without timestamps, but the rate gives it away: those transcripts said 0.4-0.7 words per second of
utterance where speech says 2-3. Decoded again in pieces cut at the quietest moments, each piece is a decode of its
own, and an early end costs one piece's words, not the rest of the sentence (1728 in three pieces: "depending on how
acidic, basic. and outline the chemical is.", its first piece's "The cab is juiced." dropped by the unsure gate; in
two: "the Cabbage Juice Chainscullard depending on how acidic. Basic alkaline, the chemical is.").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.stages.gain import frame_rms
from edge_rt.units import SAMPLE_RATE

__all__ = ["SplitOptions", "cuts", "sparse"]


@dataclass(frozen=True)
class SplitOptions:
    """When an utterance's transcript is too sparse for its length, and how it is cut."""

    # A transcript with fewer text tokens than this per second of utterance is decoded again in pieces (tokens, not
    # words: a Chinese transcript has no spaces). Read English is ~3 tokens a second of speech; an utterance also
    # holds the VAD's pre-roll and the pause that ended it.
    # Defaults (1.2, 3 pieces, min_gain 1.5, empty off) chosen on generated audio, not the eval clips
    # (tools/tune_redecode.py --items 88, seeds 53 and 59, candidates -0.5:3:0.5+splitLIMIT:PIECES:GAIN:EMPTY, run
    # 2026-12-05): seed 53 all items WER 39.4 -> 38.8 % with 3 pieces (babble 5 dB 76.1 -> 70.1 %), 39.2 % with 2;
    # limits 0.8, 1.2 and 1.6 changed the same items (2 pieces); seed 59 unchanged by any; no babble-alone item
    # said anything new.
    below_tokens_per_s: float = 1.2
    min_s: float = 3.0  # shorter utterances are not cut
    pieces: int = 3  # into this many
    # Each cut is the quietest moment (``frame_ms`` frames' level, smoothed over ``smooth_ms``) within this fraction of
    # a piece around the even cut, and at least ``min_piece_s`` from the other cuts and the ends.
    search: float = 0.5
    min_piece_s: float = 1.0
    frame_ms: int = 20
    smooth_ms: int = 100
    # The pieces' transcripts are taken when they hold at least this many times the whole's tokens, and do not say
    # ``repeat_words`` or more words twice in a row where the whole does not (recognize._pieces, _repeats).
    min_gain: float = 1.5
    repeat_words: int = 3
    # An utterance that gave no words at all (after the foreground retry) is cut too, and what its pieces say passes
    # the gates piece by piece. Off: in the same tuning runs it brought back 3 of seed 53's empty babble 5 dB items
    # (that row 70.1 -> 50.7 %) but invented text in 3 of its 11 babble-alone items ("He speaks three languages
    # through them.", P(no speech) 0.50, log-probability -0.71: no limit of the unsure gate tells those from the
    # talkers' pieces, 0.09-0.43 and -0.44 to -0.91), and on seed 59 it rescued 1 of 16 for a worse row (85.9 ->
    # 88.7 %).
    empty: bool = False

    def __post_init__(self):
        if self.below_tokens_per_s <= 0 or self.min_s <= 0 or self.min_piece_s <= 0:
            raise ValueError("SplitOptions.below_tokens_per_s, min_s and min_piece_s must be > 0, got "
                             f"{self.below_tokens_per_s}, {self.min_s}, {self.min_piece_s}")
        if not 2 <= self.pieces <= 8:
            raise ValueError(f"SplitOptions.pieces must be in 2..8, got {self.pieces}")
        if not 0 < self.search <= 1:
            raise ValueError(f"SplitOptions.search must be in (0, 1], got {self.search}")
        if self.frame_ms <= 0 or self.smooth_ms < self.frame_ms:
            raise ValueError(f"need frame_ms > 0 and smooth_ms >= frame_ms, got {self.frame_ms}, {self.smooth_ms}")
        if self.repeat_words < 1:
            raise ValueError(f"SplitOptions.repeat_words must be >= 1, got {self.repeat_words}")
        if self.min_gain < 1:
            raise ValueError(f"SplitOptions.min_gain must be >= 1, got {self.min_gain}")


def sparse(tokens: int, samples: int, options: SplitOptions) -> bool:
    """Whether ``tokens`` text tokens are too few for an utterance of ``samples`` (16 kHz) to be left whole."""
    seconds = samples / SAMPLE_RATE
    return seconds >= options.min_s and tokens < options.below_tokens_per_s * seconds


def cuts(audio: np.ndarray, options: SplitOptions) -> list[int]:
    """Where float32 16 kHz ``audio`` is cut into ``options.pieces`` pieces: the sample indices of the cuts,
    increasing, each at the quietest moment near an even cut. Fewer cuts when the audio is too short for them."""
    o = options
    frame = o.frame_ms * SAMPLE_RATE // 1000
    level = np.square(frame_rms(audio, frame))
    k = max(1, o.smooth_ms // o.frame_ms)
    level = np.convolve(level, np.ones(k) / k, mode="same")
    n, gap = len(level), int(round(o.min_piece_s * 1000 / o.frame_ms))
    half = o.search * n / o.pieces / 2
    out, last = [], 0
    for i in range(1, o.pieces):
        lo = max(int(i * n / o.pieces - half), last + gap)
        hi = min(int(i * n / o.pieces + half), n - gap)
        if hi <= lo:
            continue
        last = lo + int(np.argmin(level[lo:hi]))
        out.append(last * frame)
    return out
