"""Where capture audio comes from: a live device (see devices.py) or a file.

Every source fills a capture :class:`~edge_rt.audio.ring.Ring` at 16 kHz and
keeps a :class:`~edge_rt.audio.clock.CaptureClock`. The worker calls
:meth:`pump` when it wants more audio: live and paced sources ignore it
(their producer runs on its own), the fast file source writes the next block.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

import numpy as np

from edge_rt.audio.clock import CaptureClock
from edge_rt.audio.ring import Ring
from edge_rt.units import SAMPLE_RATE

CAPTURE_RING = 1 << 20  # 65.5 s at 16 kHz: the worker may stall on a long decode without losing audio
BLOCK = 320  # samples per paced write (20 ms), like a device period


class Source(Protocol):
    ring: Ring
    clock: CaptureClock

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def pump(self) -> None: ...

    @property
    def finished(self) -> bool:
        """True once no more samples will ever arrive."""
        ...


class FastFileSource:
    """Hands out a file's samples as fast as the worker takes them (``edge-rt translate``)."""

    def __init__(self, audio: np.ndarray, tail_s: float = 1.0, block: int = 512):
        self._audio = np.concatenate([audio.astype(np.float32), np.zeros(int(tail_s * SAMPLE_RATE), np.float32)])
        self.ring = Ring(CAPTURE_RING, policy="reject")
        self.clock = CaptureClock()
        self._pos = 0
        self._block = block

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self._pos = len(self._audio)

    def pump(self) -> None:
        if self._pos < len(self._audio):
            n = self.ring.write(self._audio[self._pos : self._pos + self._block])
            self._pos += n
            # These samples are "captured" now: intervals then measure compute, not file length.
            self.clock.anchor(self._pos - 1, time.monotonic_ns())

    @property
    def finished(self) -> bool:
        return self._pos >= len(self._audio)


class PacedSource:
    """Base of sources that a thread feeds at real-time pace, like a microphone.

    Subclasses give :meth:`_block`: the ``k``-th block of ``BLOCK`` samples, or
    None when the stream is over. The block becomes available once it has been
    "spoken" (at ``start + (k + 1) * period``) and the clock is anchored there.
    """

    def __init__(self, speed: float = 1.0, name: str = "paced-source"):
        self.ring = Ring(CAPTURE_RING, policy="overwrite")
        self.clock = CaptureClock()
        self._speed = speed
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        # A loudspeaker the microphone hears (audio/echo_path.py: `bench --loudspeaker`), None: none. Its echo
        # is added to each block when the block is due, once the sink has played what it echoes.
        self.echo = None

    def _block(self, k: int) -> np.ndarray | None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self._done.set()

    def pump(self) -> None:
        pass

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def _run(self) -> None:
        t0 = time.monotonic_ns()
        period_ns = int(BLOCK * 1e9 / SAMPLE_RATE / self._speed)
        k = 0
        while not self._stop.is_set():
            block = self._block(k)
            if block is None:
                break
            due = t0 + (k + 1) * period_ns  # a block is available once it has been "spoken"
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)
            if self.echo is not None:
                block = self.echo.add(block, due - period_ns)
            index = self.ring.written
            self.ring.write(block)
            self.clock.anchor(index + len(block) - 1, due)  # its last sample was captured at `due`
            k += 1
        self._done.set()


class PacedFileSource(PacedSource):
    """Replays audio at real-time pace from a thread, like a microphone (tests, bench, replay).

    After the audio it keeps sending ``tail_s`` of silence so the last
    utterance can end, then reports :attr:`finished`.
    """

    def __init__(self, audio: np.ndarray, tail_s: float = 2.0, lead_s: float = 0.0, speed: float = 1.0):
        super().__init__(speed)
        lead = np.zeros(round(lead_s * SAMPLE_RATE), np.float32)
        tail = np.zeros(int(tail_s * SAMPLE_RATE), np.float32)
        self._audio = np.concatenate([lead, audio.astype(np.float32), tail])

    def _block(self, k: int) -> np.ndarray | None:
        return self._audio[k * BLOCK : (k + 1) * BLOCK] if k * BLOCK < len(self._audio) else None
