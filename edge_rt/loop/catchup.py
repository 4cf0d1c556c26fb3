"""Catching up: speech queued behind earlier speech is spoken a little faster.

When a translation is ready while earlier translated speech is still waiting to be
played, the listener is behind the speaker. Speaking the new translation up to 25 %
faster (Piper's length scale, espeak-ng's words per minute) lets them catch up
without dropping anything; the overload policy (overload.py) still sheds speech
when the backlog grows far beyond what a faster rate can absorb.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CatchUpOptions", "speaking_rate"]


@dataclass(frozen=True)
class CatchUpOptions:
    # The ceiling: at 1.25x Piper's joe voice and espeak-ng stay intelligible to Whisper
    # (tests/stages/tts: the fast clause is piper-tts's own output at length_scale 0.8).
    max_rate: float = 1.25
    # Backlog (s of unplayed speech) at which speeding up begins: below half a second the listener
    # hears the new translation right after the previous one ends anyway. Chosen by reasoning, not
    # by a listening test (none was run).
    start_backlog_s: float = 0.5
    # Backlog at which the full max_rate applies; linear in between. 3 s = the backlog a second
    # utterance builds when it follows a ~3 s translation immediately (bench's real clips have
    # 1.5–4.5 s translations). Not tuned on listeners.
    full_backlog_s: float = 3.0

    def __post_init__(self):
        if not 1.0 <= self.max_rate <= 1.25:
            raise ValueError(f"max_rate must be within 1.0..1.25 (faster is hard to follow), got {self.max_rate}")
        if not 0 <= self.start_backlog_s < self.full_backlog_s:
            raise ValueError("need 0 <= start_backlog_s < full_backlog_s, got "
                             f"{self.start_backlog_s} and {self.full_backlog_s}")


def speaking_rate(backlog_s: float, options: CatchUpOptions | None) -> float:
    """The rate for a translation that starts behind ``backlog_s`` seconds of unplayed speech (1.0: none)."""
    if options is None or backlog_s <= options.start_backlog_s:
        return 1.0
    share = min(1.0, (backlog_s - options.start_backlog_s) / (options.full_backlog_s - options.start_backlog_s))
    return round(1.0 + share * (options.max_rate - 1.0), 3)
