"""Progress of the long INT8 steps, reported as events on a logger; whoever runs the build renders them.

The build library prints nothing and draws no bars: it emits :class:`ProgressEvent` records on
the ``edge_rt.build.progress`` logger at DEBUG level (silent unless a handler asks for them).
``tools/build_engines.py`` turns them into progress bars; a test or a service can collect or
ignore them.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

__all__ = ["LOGGER", "ProgressEvent", "ProgressTask", "EVENT_ATTR"]

LOGGER = logging.getLogger("edge_rt.build.progress")
EVENT_ATTR = "edge_rt_progress"  # the LogRecord attribute that carries the event
_ids = itertools.count(1)


@dataclass(frozen=True)
class ProgressEvent:
    task: int  # one id per task, unique in this process
    label: str  # e.g. "asr/encoder: entropy calibration"
    done: int  # units done so far
    total: int | None  # None: unknown (a spinner)
    finished: bool = False  # the task is over (remove its bar)


class ProgressTask:
    """One task's progress; a context manager that reports ``finished`` on exit."""

    def __init__(self, label: str, total: int | None = None):
        self.id, self.label, self.total, self.done = next(_ids), label, total, 0
        self._emit()

    def _emit(self, finished: bool = False) -> None:
        if LOGGER.isEnabledFor(logging.DEBUG):
            event = ProgressEvent(self.id, self.label, self.done, self.total, finished)
            LOGGER.debug("%s %d/%s", self.label, self.done, self.total, extra={EVENT_ATTR: event})

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._emit()

    def update(self, done: int | None = None, label: str | None = None) -> None:
        self.done = self.done if done is None else done
        self.label = self.label if label is None else label
        self._emit()

    def finish(self) -> None:
        self._emit(finished=True)

    def __enter__(self) -> "ProgressTask":
        return self

    def __exit__(self, *exc) -> None:
        self.finish()
