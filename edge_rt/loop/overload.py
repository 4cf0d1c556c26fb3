"""Overload policy: what the loop gives up, in order, when compute falls behind real time.

The loop measures how far behind it is in two places:

* **capture lag**: audio captured but not yet read by the worker (the capture
  ring's ``available()``), in seconds;
* **output backlog**: translated speech synthesized but not yet played (the
  sink's ``pending()`` plus the loop's own queue), in seconds.

and sheds work in this order, cheapest loss first:

1. capture lag > ``skip_optional_s``: no partial re-decodes and no speculative
   decodes at pauses (live captions pause; final transcripts are unchanged);
2. output backlog > ``shorten_s``: a new translation speaks only its first
   ``clauses`` clause(s), and older translations' unspoken clauses are skipped;
3. capture lag > ``drop_s``: an utterance that ends now is dropped without
   decoding; output backlog > ``drop_s``: the oldest queued utterance's unplayed
   speech is dropped. Each drop is counted in :class:`OverloadStats` and named
   in the utterance's trace (``dropped``).

So no queue grows without bound: the capture lag stays below ``drop_s`` plus
one utterance's decode, the output backlog below ``drop_s`` plus one clause.
Pure decisions on numbers; the loop acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OverloadOptions", "OverloadStats"]


@dataclass(frozen=True)
class OverloadOptions:
    skip_optional_s: float = 1.5  # capture lag (s) above which partials and speculation are skipped
    shorten_s: float = 4.0  # output backlog (s) above which a translation speaks only its first clauses
    clauses: int = 1  # clauses a shortened translation speaks
    drop_s: float = 8.0  # capture lag / output backlog (s) above which the oldest pending utterance is dropped

    def __post_init__(self):
        if not 0 < self.skip_optional_s <= self.drop_s:
            raise ValueError(f"overload thresholds must satisfy 0 < skip_optional_s ({self.skip_optional_s}) "
                             f"<= drop_s ({self.drop_s})")
        if not 0 < self.shorten_s <= self.drop_s:
            raise ValueError(f"overload thresholds must satisfy 0 < shorten_s ({self.shorten_s}) <= drop_s "
                             f"({self.drop_s})")
        if self.clauses < 1:
            raise ValueError(f"a shortened translation speaks at least 1 clause, got clauses={self.clauses}")

    def skip_optional(self, capture_lag_s: float) -> bool:
        return capture_lag_s > self.skip_optional_s

    def shorten(self, output_backlog_s: float) -> bool:
        return output_backlog_s > self.shorten_s

    def drop(self, lag_or_backlog_s: float) -> bool:
        return lag_or_backlog_s > self.drop_s


@dataclass
class OverloadStats:
    """What the policy shed (counters only grow) and the worst lag it saw."""

    partials_skipped: int = 0
    speculations_skipped: int = 0
    translations_shortened: int = 0  # new translations cut to their first clauses
    tails_skipped: int = 0  # older translations whose unspoken clauses were skipped
    utterances_dropped: int = 0  # ended while the capture lag was over drop_s: never decoded
    speech_dropped: int = 0  # queued translations dropped from the output backlog
    max_capture_lag_s: float = 0.0
    max_output_backlog_s: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)
