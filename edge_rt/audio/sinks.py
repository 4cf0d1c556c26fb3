"""Where translated speech goes: a device (see devices.py) or a file.

A sink takes float32 mono samples at its own rate. Ring-backed sinks
back-pressure the synthesizer (``write`` returns how much it accepted) and
report when the first sample of each utterance reaches the device, so the
trace can stamp ``first_output``. A ring-backed sink also records what it
played into a :class:`PlaybackTap` (the echo canceller's far-end reference, see
frontend.py) and can be ducked, held or flushed when someone talks over it (barge-in,
see loop/output.py).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Protocol

import numpy as np

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.ring import Ring

PLAYBACK_RING = 1 << 18  # ~5.9 s at 44.1 kHz, 16 s at 16 kHz
# What was played is kept this long for the echo canceller, which reads it when the worker reaches the
# capture hop heard at the same time: the worker may lag the microphone by a long decode (seconds).
TAP_S = 8
DUCK_GAIN = 0.25  # -12 dB: speech under a talking person stays audible but no longer masks them


class PlaybackTap:
    """The samples a sink handed to its device, in a ring indexed by a clock of their own.

    One producer (the sink's callback: :meth:`record`), one consumer (the worker's echo canceller).
    ``clock`` maps a played sample's index to the monotonic time it is heard.
    """

    def __init__(self, rate: int, seconds: float = TAP_S):
        self.ring = Ring(1 << max(1, int(seconds * rate) - 1).bit_length(), policy="overwrite")
        self.clock = CaptureClock(rate)

    def record(self, played: np.ndarray, t_ns: int) -> None:
        """``played`` went out; its first sample is heard at ``t_ns``."""
        index = self.ring.written
        self.ring.write(played)
        self.clock.anchor(index, t_ns)


class Sink(Protocol):
    rate: int

    def write(self, samples: np.ndarray) -> int:
        """Queue samples; returns how many were accepted (the rest must be offered again)."""
        ...

    def mark(self, on_first_output: Callable[[int], None]) -> None:
        """Call ``on_first_output(t_ns)`` when the next sample written reaches the device."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def pending(self) -> int:
        """Samples written but not yet played."""
        ...


class RingSink:
    """Playback ring + markers; a device callback or a paced thread drains it with :meth:`consume`."""

    def __init__(self, rate: int, capacity: int = PLAYBACK_RING):
        self.rate = rate
        self.ring = Ring(capacity, policy="reject")
        self.tap = PlaybackTap(rate)
        self.gain = 1.0  # set by the worker (duck), applied by the callback
        self.held = False  # set by the worker (pause): the callback plays silence and keeps what is queued
        self._flush_to = 0  # the worker asks the callback to skip unplayed samples up to this index
        self._marks: collections.deque[tuple[int, Callable[[int], None]]] = collections.deque()

    def write(self, samples: np.ndarray) -> int:
        return self.ring.write(samples)

    def duck(self, on: bool) -> None:
        """Play at :data:`DUCK_GAIN` (someone talks over the speech) or at full level again."""
        self.gain = DUCK_GAIN if on else 1.0

    def hold(self, on: bool) -> None:
        """Stop playing, keeping every unplayed sample (someone talks over the speech), or play on."""
        self.held = on

    def flush(self) -> None:
        """Drop everything written but not played yet (the callback skips it on its next buffer)."""
        self._flush_to = self.ring.written

    def mark(self, on_first_output: Callable[[int], None]) -> None:
        self._marks.append((self.ring.written, on_first_output))

    def pending(self) -> int:
        return self.ring.available()

    def consume(self, out: np.ndarray, t_ns: int) -> None:
        """Fill ``out`` (silence on underrun, counted); ``t_ns`` is when out[0] is heard."""
        if self.held:  # paused: nothing is read, so nothing is lost and no mark fires
            out[:] = 0.0
            self.tap.record(out, t_ns)
            return
        if self._flush_to > self.ring.read_index:
            self._skip(self._flush_to, out)
        first, n = self.ring.read_into(out, fill_silence=True)
        while self._marks and self._marks[0][0] < first + n:
            index, callback = self._marks.popleft()
            offset = max(0, index - first)
            callback(t_ns + offset * 1_000_000_000 // self.rate)
        if self.gain != 1.0:
            out *= self.gain
        self.tap.record(out, t_ns)

    def _skip(self, to: int, scratch: np.ndarray) -> None:
        """Consumer side of :meth:`flush`: read the unplayed samples away; their marks never fire."""
        while self.ring.read_index < to and self.ring.available():
            self.ring.read_into(scratch[: min(len(scratch), to - self.ring.read_index)])
        while self._marks and self._marks[0][0] < self.ring.read_index:
            self._marks.popleft()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class PacedFileSink(RingSink):
    """Plays into memory at real-time pace from a thread, like a speaker; ``audio()`` returns the recording.

    With ``keep=False`` the played audio is discarded (long soak runs: memory stays flat).
    """

    def __init__(self, rate: int, block: int | None = None, capacity: int = PLAYBACK_RING, keep: bool = True):
        super().__init__(rate, capacity)
        self._block = block or rate // 50  # 20 ms
        self._keep = keep
        self._chunks: list[np.ndarray] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-sink", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def audio(self) -> np.ndarray:
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)

    def _run(self) -> None:
        t0 = time.monotonic_ns()
        period_ns = self._block * 1_000_000_000 // self.rate
        scratch = np.empty(self._block, np.float32)  # reused when the audio is not kept
        k = 0
        while not self._stop.is_set():
            due = t0 + k * period_ns
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)
            out = np.empty(self._block, np.float32) if self._keep else scratch
            self.consume(out, time.monotonic_ns())
            if self._keep:
                self._chunks.append(out)
            k += 1


class TimelineSink:
    """Writes each utterance into an output track at the capture clock's current time (fast file mode).

    Nothing is ever refused; an utterance that would overlap the previous one
    starts after it, with ``gap_s`` of silence.
    """

    def __init__(self, rate: int, now_s: Callable[[], float], gap_s: float = 0.25):
        self.rate = rate
        self._now_s = now_s
        self._gap = int(gap_s * rate)
        self._pieces: list[tuple[int, np.ndarray]] = []
        self._cursor = 0
        self._open = False  # inside an utterance: samples continue where the last ones ended

    def mark(self, on_first_output: Callable[[int], None]) -> None:
        self._open = False
        start = max(int(self._now_s() * self.rate), self._cursor + (self._gap if self._pieces else 0))
        self._cursor = start
        on_first_output(time.monotonic_ns())  # "played" the moment it is placed: no device in between

    def write(self, samples: np.ndarray) -> int:
        self._pieces.append((self._cursor, samples.copy()))
        self._cursor += len(samples)
        return len(samples)

    def pending(self) -> int:
        return 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def audio(self, min_seconds: float = 0.0) -> np.ndarray:
        total = max(self._cursor, int(min_seconds * self.rate))
        track = np.zeros(total, np.float32)
        for start, piece in self._pieces:
            track[start : start + len(piece)] = piece
        return track
