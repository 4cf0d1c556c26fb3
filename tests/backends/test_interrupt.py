"""The run watcher: sets a run's ``terminate`` once ``stop()`` says so, and lets go cleanly."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from edge_rt.backends.interrupt import Watcher


def _wait_for(cond, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.001)
    return False


def test_the_flag_is_set_once_stop_says_so_and_cleared_on_leaving():
    w = Watcher(poll_s=0.001)
    ro = SimpleNamespace(terminate=False)
    calls = []

    def stop() -> bool:
        calls.append(threading.current_thread().name)
        return len(calls) >= 3

    with w.watching(ro, stop):
        assert _wait_for(lambda: ro.terminate), "the watcher never set terminate"
        n = len(calls)
        time.sleep(0.01)
        assert len(calls) == n == 3  # it let go of the run once it fired
    assert ro.terminate is False and w.fired == 1
    assert set(calls) == {"edge-rt-run-watcher"}


def test_a_run_that_ends_first_is_not_terminated_and_the_watcher_lets_go():
    w = Watcher(poll_s=0.001)
    ro = SimpleNamespace(terminate=False)
    calls = []
    with w.watching(ro, lambda: calls.append(1) or False):
        assert _wait_for(lambda: len(calls) >= 2)
    n = len(calls)
    time.sleep(0.01)
    assert len(calls) == n and ro.terminate is False and w.fired == 0  # asked no more after the block


def test_one_run_at_a_time_and_a_raising_stop_is_counted_not_fatal():
    w = Watcher(poll_s=0.001)
    ro = SimpleNamespace(terminate=False)
    with w.watching(ro, lambda: False):
        with pytest.raises(RuntimeError, match="one run at a time"):
            with w.watching(SimpleNamespace(terminate=False), lambda: False):
                pass
    with w.watching(ro, lambda: 1 / 0):
        assert _wait_for(lambda: w.errors == 1)
        assert ro.terminate is False  # the run is left to finish
    with w.watching(ro, lambda: True):  # the thread survived the error
        assert _wait_for(lambda: ro.terminate)
    assert w.fired == 1


def test_poll_interval_is_checked():
    with pytest.raises(ValueError, match="poll_s"):
        Watcher(poll_s=0)
