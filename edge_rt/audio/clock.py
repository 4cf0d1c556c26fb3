"""Sample index ↔ monotonic time for a capture (or playback) stream.

The producer (audio callback or paced file thread) anchors the clock with the
index of the sample it is writing and the monotonic time it was captured; any
index then converts to a time between the two anchors around it (the device's real
rate), or from the newest anchor by the nominal rate. The fast file source anchors
it when the worker takes samples, so its latencies are compute time plus the
endpointer's wait at the nominal rate.

Why a history of anchors, not only the latest: the worker converts indices it
reads seconds after they were captured (a long decode), and a device clock is not
exactly the nominal rate. Extrapolating from the latest anchor over that lag put
the JACK test's stamps (a dummy driver running ~6 % slow on a loaded machine) up
to a second off, and misaligned the echo canceller's reference by as much.
"""

from __future__ import annotations

import time

import numpy as np

from edge_rt.units import SAMPLE_RATE

# Anchors kept: one per callback, so ~20 s of 20 ms device buffers, longer than the worker ever lags
# (the capture ring holds less); older indices extrapolate from the oldest kept anchor.
ANCHORS = 1024
_GUARD = 16  # the newest ANCHORS - _GUARD anchors are read: the writer may be overwriting the oldest


class CaptureClock:
    """(index, t_ns) anchors; one writer (the producer), many readers, no allocation per anchor."""

    def __init__(self, rate: int = SAMPLE_RATE):
        self.rate = rate
        self._idx = np.zeros(ANCHORS, np.int64)
        self._ns = np.zeros(ANCHORS, np.int64)
        self._n = 0  # anchors written; slot k % ANCHORS holds anchor k
        self._anchor: tuple[int, int] = (0, time.monotonic_ns())  # the latest, replaced whole: atomic for readers

    def anchor(self, index: int, t_ns: int) -> None:
        """Sample ``index`` was captured at monotonic ``t_ns`` (indices never decrease between calls)."""
        k = self._n % ANCHORS
        self._idx[k] = index
        self._ns[k] = t_ns
        self._n += 1  # published after the slot is written
        self._anchor = (index, t_ns)

    def _find(self, values: np.ndarray, key: int, latest: int) -> int | None:
        """Slot of the oldest kept anchor whose value is >= ``key`` (None: none, use the latest)."""
        n = self._n
        if latest < key or n == 0:
            return None
        lo, hi = max(0, n - (ANCHORS - _GUARD)), n - 1  # logical anchor numbers
        if values[lo % ANCHORS] >= key:
            return lo % ANCHORS
        while hi - lo > 1:  # invariant: values[lo] < key <= values[hi]
            mid = (lo + hi) // 2
            if values[mid % ANCHORS] >= key:
                hi = mid
            else:
                lo = mid
        return hi % ANCHORS

    def ns(self, index: int) -> int:
        """Monotonic time (ns) at which sample ``index`` was (or will be) captured."""
        return self._convert(index, self._idx, self._ns, 0)

    def index(self, t_ns: int) -> int:
        """Index of the sample captured (or played) at monotonic ``t_ns``: the inverse of :meth:`ns`."""
        return self._convert(t_ns, self._ns, self._idx, 1)

    def _convert(self, x: int, xs: np.ndarray, ys: np.ndarray, side: int) -> int:
        """Between two kept anchors: linear interpolation (the device's real rate); outside them: the
        nominal rate from the nearest (``side`` 0: index -> ns, 1: ns -> index)."""
        latest = self._anchor
        k = self._find(xs, x, latest[side])
        if k is None:
            x0, y0 = latest[side], latest[1 - side]
        else:
            x1, y1 = int(xs[k]), int(ys[k])
            j = (k - 1) % ANCHORS
            x0, y0 = int(xs[j]), int(ys[j])
            if k != self._oldest() and x0 < x <= x1 and y0 < y1:
                return y0 + (x - x0) * (y1 - y0) // (x1 - x0)
            x0, y0 = x1, y1
        if side == 0:
            return y0 + (x - x0) * 1_000_000_000 // self.rate
        return y0 + (x - x0) * self.rate // 1_000_000_000

    def _oldest(self) -> int:
        return max(0, self._n - (ANCHORS - _GUARD)) % ANCHORS

    def now_ns(self) -> int:
        return time.monotonic_ns()
