"""When an utterance's greedy decode is decoded again with a beam (LoopOptions.redecode; used in recognize.py).

The loop decodes greedily: a beam costs ~1.5x a decode on every turn here. faster-whisper decodes with a beam of 5
and, below an average log-probability of -1.0, again at higher temperatures. Where Whisper is unsure of its greedy
words (noise), a beam finds better ones (README, Noise); where it is sure (clean speech), greedy's words stand.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RedecodeOptions"]


@dataclass(frozen=True)
class RedecodeOptions:
    """A greedy decode whose average log-probability is below ``below_logprob`` is decoded again with a beam."""

    below_logprob: float = -0.5  # Whisper's average log-probability per token (AsrResult.avg_logprob)
    beam_size: int = 5

    def __post_init__(self):
        if not self.below_logprob < 0:
            raise ValueError(f"RedecodeOptions.below_logprob must be < 0 (a log-probability), got {self.below_logprob}")
        if not 2 <= self.beam_size <= 16:
            raise ValueError(f"RedecodeOptions.beam_size must be in 2..16, got {self.beam_size}")
