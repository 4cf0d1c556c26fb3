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
    # The beam's words are not taken when they say something twice and greedy's do not: ``repeat_words`` or more
    # words right after themselves (recognize._repeats; tiny.en's beam wrote JFK's "And so my fellow American."
    # twice). 1 (a word said twice, "bi, bi, tra, tra") changed no item of the tuning runs below.
    repeat_words: int = 3
    # ... nor when they are fewer than ``min_kept`` times greedy's: a beam can finish early, on a short hypothesis
    # whose few tokens score well, and drop what greedy heard ("It has" where greedy wrote "It has been reading all
    # week in the mountains.", 4-talker babble at 5 dB). Chosen on generated audio, not the eval clips
    # (tools/tune_redecode.py --items 88, seeds 53 and 59, limit -0.5, run 2026-12-04): 0.5 and 0.6 each changed
    # that one item of the 198 (seed 59, babble 5 dB row 85.9 -> 77.5 %, all items 38.1 -> 37.2 %) and nothing
    # else; 0 takes any beam (the rule before).
    min_kept: float = 0.5

    def __post_init__(self):
        if not self.below_logprob < 0:
            raise ValueError(f"RedecodeOptions.below_logprob must be < 0 (a log-probability), got {self.below_logprob}")
        if not 2 <= self.beam_size <= 16:
            raise ValueError(f"RedecodeOptions.beam_size must be in 2..16, got {self.beam_size}")
        if self.repeat_words < 1:
            raise ValueError(f"RedecodeOptions.repeat_words must be >= 1, got {self.repeat_words}")
        if not 0 <= self.min_kept <= 1:
            raise ValueError(f"RedecodeOptions.min_kept must be in [0, 1], got {self.min_kept}")
