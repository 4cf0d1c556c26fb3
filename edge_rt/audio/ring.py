"""Single-producer single-consumer ring buffer of audio samples, without locks.

Storage is one preallocated numpy array whose capacity is a power of two;
positions are two monotonically increasing counters, ``written`` (only the
producer stores it) and ``read`` (only the consumer stores it). A sample's
counter value is its clock: with a known stream start, sample ``i`` was
captured at ``start + i / rate``.

Policies when full:
  * ``overwrite`` (capture side): the producer never waits; it overwrites the
    oldest audio. The consumer notices on its next read, skips what was lost,
    counts it as an overrun and records the gap ``(first lost index, count)``.
  * ``reject`` (playback side): the producer writes only what fits and is told
    how much, so the synthesizer is back-pressured.
When empty, :meth:`read_into` with ``fill_silence`` pads with zeros and counts
an underrun (playback: silence, counted).

Python stores an int reference atomically, and each counter has one writer,
so the two threads need no lock; the only race (a read overlapping an
overwrite) is detected after the copy through the producer's ``claimed``
counter, which it stores before it touches the storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

POLICIES = ("overwrite", "reject")


@dataclass
class RingStats:
    overruns: int = 0  # overwrite events noticed by the consumer
    dropped: int = 0  # samples lost to overwrites
    underruns: int = 0  # reads that found too little and padded with silence
    silence: int = 0  # samples of silence handed out on underrun
    rejected: int = 0  # samples a full 'reject' ring refused
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (first lost sample index, count), bounded
    max_gaps: int = 1024


class Ring:
    """SPSC ring of ``capacity`` float32 samples (``capacity`` a power of two)."""

    def __init__(self, capacity: int, policy: str = "overwrite", dtype=np.float32):
        if capacity < 2 or capacity & (capacity - 1):
            raise ValueError(f"ring capacity must be a power of two >= 2, got {capacity}")
        if policy not in POLICIES:
            raise ValueError(f"ring policy must be one of {POLICIES}, got {policy!r}")
        self._buf = np.zeros(capacity, dtype=dtype)
        self._mask = capacity - 1
        self.capacity = capacity
        self.policy = policy
        self._written = 0  # stored by the producer only: samples published
        self._claimed = 0  # stored by the producer only: samples it has started to write
        self._read = 0  # stored by the consumer only
        self.stats = RingStats()

    # -- shared views -------------------------------------------------------
    @property
    def written(self) -> int:
        """Total samples ever written: the index of the next sample."""
        return self._written

    @property
    def read_index(self) -> int:
        """Index of the next sample the consumer will read."""
        return self._read

    def available(self) -> int:
        """Samples the consumer can read now (at most ``capacity``)."""
        return min(self._written - self._read, self.capacity)

    def free(self) -> int:
        """Samples the producer can write without overwriting unread data."""
        return self.capacity - (self._written - self._read)

    # -- producer -------------------------------------------------------------
    def write(self, samples: np.ndarray) -> int:
        """Append samples; returns how many were accepted.

        ``overwrite``: all of them (the oldest unread audio may be lost; of a
        block longer than the ring only the newest ``capacity`` samples stay,
        but the clock still advances by the whole block).
        ``reject``: only what fits in :meth:`free`; the rest is counted.
        """
        n = len(samples)
        accepted = n
        w = self._written
        if self.policy == "reject":
            room = self.capacity - (w - self._read)
            if n > room:
                self.stats.rejected += n - room
                accepted = n = max(room, 0)
                samples = samples[:n]
        elif n > self.capacity:
            w += n - self.capacity
            samples = samples[n - self.capacity :]
            n = self.capacity
        if n == 0:
            return accepted
        self._claimed = w + n  # announce the slots about to change (the consumer checks it)
        start = w & self._mask
        first = min(n, self.capacity - start)
        self._buf[start : start + first] = samples[:first]
        if first < n:
            self._buf[: n - first] = samples[first:]
        self._written = w + n  # publish only after the data is in place
        return accepted

    # -- consumer -------------------------------------------------------------
    def _skip_overrun(self) -> None:
        lost = self._written - self._read - self.capacity
        if lost > 0:
            self._record_loss(self._read, lost)
            self._read += lost

    def _record_loss(self, first: int, count: int) -> None:
        s = self.stats
        s.overruns += 1
        s.dropped += count
        if len(s.gaps) < s.max_gaps:
            s.gaps.append((first, count))

    def read_into(self, out: np.ndarray, fill_silence: bool = False) -> tuple[int, int]:
        """Copy up to ``len(out)`` samples into ``out``; returns ``(first index, count)``.

        With ``fill_silence``, a short read is padded with zeros and counted as
        an underrun; the count returned is still the real samples copied.
        """
        self._skip_overrun()
        r = self._read
        n = min(len(out), self._written - r)
        start = r & self._mask
        first = min(n, self.capacity - start)
        out[:first] = self._buf[start : start + first]
        if first < n:
            out[first:n] = self._buf[: n - first]
        # The producer may have overwritten part of what we just copied:
        # anything older than (written - capacity) is suspect; keep the intact tail.
        oldest_valid = self._claimed - self.capacity
        if oldest_valid > r:
            torn = min(n, oldest_valid - r)
            self._record_loss(r, torn)
            if torn < n:
                out[: n - torn] = out[torn:n]
            self._read = r + n
            r, n = r + torn, n - torn
        else:
            self._read = r + n
        if fill_silence and n < len(out):
            out[n:] = 0.0
            self.stats.underruns += 1
            self.stats.silence += len(out) - n
        return r, n

    def peek_newest(self, out: np.ndarray) -> int:
        """Copy the newest ``len(out)`` published samples into ``out`` without consuming anything;
        returns how many were copied (fewer when fewer were ever written, 0 when the producer
        overwrote them while they were copied). Allocation-free; for the consumer's side (the worker,
        or the run watcher while the worker waits inside an engine run: it changes no index)."""
        w = self._written
        n = min(len(out), w, self.capacity)
        start = (w - n) & self._mask
        first = min(n, self.capacity - start)
        out[:first] = self._buf[start : start + first]
        if first < n:
            out[first:n] = self._buf[: n - first]
        if self._claimed - self.capacity > w - n:  # the producer lapped the ring meanwhile
            return 0
        return n

    def read(self, n: int) -> tuple[int, np.ndarray]:
        """Allocate and return up to ``n`` samples (for tests and tools, not the hot loop)."""
        out = np.empty(n, dtype=self._buf.dtype)
        first, count = self.read_into(out)
        return first, out[:count]
