"""What the loop tells the rest of the process: a small callback interface.

Observers run on the worker thread, so every method must return quickly and
never block (hand heavy work, e.g. file writes, to a thread of your own).
Subclass :class:`LoopObserver` and override only what you need; the loop
calls, in this order of a session's life:

* ``on_start(loop)``: audio is open (source and sink started);
* ``on_tick()``: once per worker iteration (watchdog pings, stall checks);
* ``on_hop(first, samples)``: each 512-sample capture hop, ``samples`` a view
  of float32 16 kHz audio starting at capture index ``first`` (copy to keep it);
* ``on_utterance(trace)``: an utterance is complete (its first translated
  sample was played, or it was dropped), so its latency is known;
* ``on_error(exc, trace)``: a stage failed (``trace`` is the utterance it
  failed on, or None when the loop itself is going down).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edge_rt.loop.trace import UtteranceTrace

if TYPE_CHECKING:
    from edge_rt.loop.loop import Loop

__all__ = ["LoopObserver"]


class LoopObserver:
    """No-op base: every hook does nothing unless overridden."""

    def on_start(self, loop: "Loop") -> None:
        pass

    def on_tick(self) -> None:
        pass

    def on_hop(self, first: int, samples: np.ndarray) -> None:
        pass

    def on_utterance(self, trace: UtteranceTrace) -> None:
        pass

    def on_error(self, exc: BaseException, trace: UtteranceTrace | None) -> None:
        pass
