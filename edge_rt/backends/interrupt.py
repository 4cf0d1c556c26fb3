"""Stop an ONNX Runtime run from outside while the calling thread waits in it.

The loop's worker decodes a partial caption synchronously; when the speaker pauses meanwhile, the
caption is no longer wanted and the speculation should start at once. Between decoder steps the
worker asks its ``stop`` itself (``Asr.transcribe(stop=...)``), but an encoder run is one call of
100-300 ms here, and the thread inside it asks nothing. ONNX Runtime's answer is
``RunOptions.terminate``: set from another thread, the run returns early with an error.

:class:`Watcher` is that other thread: one per process, started on first use, asleep unless a run
is being watched. While :meth:`Watcher.watching` is active it calls ``stop()`` every ``poll_s`` and
sets the run's ``terminate`` when it says True. The ``stop`` therefore runs on the watcher thread
while the worker is inside the engine run (the worker asks it itself before and after): it must
read only what the worker does not change during the run (``loop/pause_watch.PauseWatch`` peeks at
the capture ring, which only the audio callback writes).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["Watcher", "watcher"]

POLL_S = 0.005  # how often stop() is asked during a run: 5 ms, against runs of 50-300 ms


class Watcher:
    """A daemon thread that sets ``run_options.terminate`` once the watched ``stop()`` returns True."""

    def __init__(self, poll_s: float = POLL_S):
        if poll_s <= 0:
            raise ValueError(f"poll_s must be > 0 seconds, got {poll_s}")
        self.poll_s = poll_s
        self._cond = threading.Condition()
        self._job: tuple[object, Callable[[], bool]] | None = None
        self._thread: threading.Thread | None = None
        self.fired = 0  # runs whose terminate this watcher set
        self.errors = 0  # stop() calls that raised (the run is then left to finish)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="edge-rt-run-watcher", daemon=True)
            self._thread.start()

    @contextmanager
    def watching(self, run_options, stop: Callable[[], bool]) -> Iterator[None]:
        """Inside the block, ``run_options.terminate`` is set as soon as ``stop()`` says True.

        On leaving, the watcher has let go of the run (it can no longer set the flag), and the flag is
        cleared, so ``run_options`` can be reused for the next run. The watcher calls ``stop`` under
        the lock that leaving takes, so leaving waits for a call in progress: ``stop`` is never run by
        both threads at once.
        """
        with self._cond:
            if self._job is not None:
                raise RuntimeError("Watcher watches one run at a time; a run is already watched")
            self._ensure_thread()
            self._job = (run_options, stop)
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:  # the watcher checks and sets under this lock: after it, it cannot fire
                self._job = None
            run_options.terminate = False

    def _serve(self) -> None:
        with self._cond:
            while True:
                while self._job is None:
                    self._cond.wait()
                run_options, stop = self._job
                try:
                    hit = bool(stop())
                except Exception:  # noqa: BLE001 - a broken stop must not kill the thread: the run finishes
                    self.errors += 1
                    self._job = None
                    continue
                if hit:
                    run_options.terminate = True
                    self.fired += 1
                    self._job = None
                    continue
                self._cond.wait(self.poll_s)


_WATCHER: Watcher | None = None
_LOCK = threading.Lock()


def watcher() -> Watcher:
    """The process's watcher (created on first use; its thread starts with the first watched run)."""
    global _WATCHER
    with _LOCK:
        if _WATCHER is None:
            _WATCHER = Watcher()
        return _WATCHER
