"""Sample index ↔ monotonic time for a capture stream.

The producer (audio callback or paced file thread) anchors the clock with the
index of the sample it is writing and the monotonic time it was captured; any
index then converts to a time by the nominal rate. The fast file source
anchors it when the worker takes samples, so its latencies are compute time
plus the endpointer's wait at the nominal rate.
"""

from __future__ import annotations

import time

from edge_rt.units import SAMPLE_RATE


class CaptureClock:
    """Latest (index, t_ns) anchor; one writer (the producer), many readers."""

    def __init__(self, rate: int = SAMPLE_RATE):
        self.rate = rate
        self._anchor: tuple[int, int] = (0, time.monotonic_ns())  # replaced whole: atomic for readers

    def anchor(self, index: int, t_ns: int) -> None:
        """Sample ``index`` was captured at monotonic ``t_ns``."""
        self._anchor = (index, t_ns)

    def ns(self, index: int) -> int:
        """Monotonic time (ns) at which sample ``index`` was (or will be) captured."""
        a_idx, a_ns = self._anchor
        return a_ns + (index - a_idx) * 1_000_000_000 // self.rate

    def now_ns(self) -> int:
        return time.monotonic_ns()
