"""Independent gate items on several threads, each thread with engines of its own.

ONNX Runtime releases the GIL inside a run, so ``n`` threads that each own one-thread sessions keep
``n`` cores busy on work whose single runs use two threads poorly (Whisper's step decoder multiplies
one row at a time). Measured on this 2-core machine, 24 transcriptions of the real English clips,
two one-thread workers against one two-thread ``Asr``: Whisper tiny x1.77, base x1.47, the same text
(``tests/build/calibration/test_workers.py`` holds the same-text part).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

__all__ = ["map_on_workers"]

W = TypeVar("W")
T = TypeVar("T")
R = TypeVar("R")


def map_on_workers(make: Callable[[], W], fn: Callable[[W, T], R], items: Iterable[T], workers: int) -> list[R]:
    """``[fn(worker, item) for item in items]`` in item order, on ``workers`` threads.

    Each thread calls ``make()`` once, on its first item, and keeps that worker for its later items,
    so no worker is used by two threads. The first exception is raised here, as the plain loop would.
    """
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        worker = make()
        return [fn(worker, x) for x in items]
    local = threading.local()

    def job(item: T) -> R:
        worker = getattr(local, "worker", None)
        if worker is None:
            worker = local.worker = make()
        return fn(worker, item)

    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="gate") as pool:
        return list(pool.map(job, items))
