"""A loudspeaker heard by the microphone, for file runs: the sink's playback mixed back into the capture.

`edge-rt bench --loudspeaker` runs each clip with this path (6 dB down, 40 ms late: the issue's live JACK
test, tests/loop/test_loudspeaker_jack.py), so the echo canceller has an echo to learn from, as on a kiosk.
The source thread calls :meth:`LoopBack.add` on each block it is about to deliver; what it adds is what
the sink played ``delay_ms`` before the block was "captured", read from a tap of its own (one consumer per
ring: the front end reads the sink's main tap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge_rt.audio.frontend import FarEnd

__all__ = ["EchoPath", "LoopBack"]


@dataclass(frozen=True)
class EchoPath:
    gain_db: float = -6.0  # the live test: the output fed back 6 dB down
    delay_ms: int = 40  # ... and 40 ms late

    def __post_init__(self):
        if not -60.0 <= self.gain_db <= 0.0:
            raise ValueError(f"echo gain_db must be -60..0 dB, got {self.gain_db}")
        if not 0 <= self.delay_ms <= 500:
            raise ValueError(f"echo delay_ms must be 0..500 ms, got {self.delay_ms}")


class LoopBack:
    """Adds what ``tap`` (a sink's :class:`~edge_rt.audio.sinks.PlaybackTap`) played, as ``path`` says."""

    def __init__(self, tap, path: EchoPath):
        self.path = path
        self._far = FarEnd(tap)
        self._gain = np.float32(10 ** (path.gain_db / 20))
        self._delay_ns = path.delay_ms * 1_000_000

    def add(self, block: np.ndarray, t_ns: int) -> np.ndarray:
        """``block`` (first sample captured at ``t_ns``) with the echo of the playback added (a new array)."""
        echo = np.zeros(len(block), np.float32)
        self._far.read(t_ns - self._delay_ns, echo)
        return block + self._gain * echo
