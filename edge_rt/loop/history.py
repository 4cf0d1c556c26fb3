"""The last N seconds of capture audio, addressable by sample index (for utterance slices)."""

from __future__ import annotations

import numpy as np


class History:
    """A preallocated circular buffer where sample ``i`` lives at ``i mod capacity``."""

    def __init__(self, capacity: int):
        if capacity & (capacity - 1):
            raise ValueError(f"history capacity must be a power of two, got {capacity}")
        self._buf = np.zeros(capacity, np.float32)
        self._mask = capacity - 1
        self.capacity = capacity
        self.end = 0  # one past the newest sample stored

    def write(self, first: int, samples: np.ndarray) -> None:
        """Store samples that start at index ``first`` (gaps from overruns stay zero)."""
        n = len(samples)
        if first > self.end:  # audio was lost: clear the gap so it reads as silence
            self._fill_zero(self.end, min(first, self.end + self.capacity))
        start = first & self._mask
        k = min(n, self.capacity - start)
        self._buf[start : start + k] = samples[:k]
        if k < n:
            self._buf[: n - k] = samples[k:]
        self.end = max(self.end, first + n)

    def _fill_zero(self, a: int, b: int) -> None:
        self._buf[np.arange(a, b) & self._mask] = 0.0  # rare: only after an overrun

    def read_into(self, a: int, out: np.ndarray) -> tuple[int, int]:
        """Fill ``out`` with samples [a, a + len(out)), zeros where none is stored (older than the buffer
        holds, or not written yet), allocating nothing. Returns the stored span [lo, hi) that was
        copied (hi <= lo: none)."""
        b = a + len(out)
        lo, hi = max(a, self.end - self.capacity, 0), min(b, self.end)
        if hi <= lo:
            out[:] = 0.0
            return lo, hi
        out[: lo - a] = 0.0
        out[hi - a :] = 0.0
        start = lo & self._mask
        k = min(hi - lo, self.capacity - start)
        out[lo - a : lo - a + k] = self._buf[start : start + k]
        out[lo - a + k : hi - a] = self._buf[: hi - lo - k]
        return lo, hi

    def slice(self, a: int, b: int) -> np.ndarray:
        """Copy of samples [a, b); the part older than the buffer holds is dropped."""
        a = max(a, self.end - self.capacity, 0)
        b = min(b, self.end)
        if b <= a:
            return np.zeros(0, np.float32)
        idx = np.arange(a, b) & self._mask
        return self._buf[idx]
