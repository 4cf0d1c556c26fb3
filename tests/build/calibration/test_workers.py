"""Gate items on several threads: item order, one worker per thread, errors, and the same transcripts on real speech."""

from __future__ import annotations

import threading
import time

import pytest

from edge_rt.audio.files import read_audio
from edge_rt.build.calibration.stage_view import StageView
from edge_rt.build.calibration.workers import map_on_workers


def test_items_come_back_in_order_and_no_worker_is_shared_between_threads():
    made: list[dict] = []
    lock = threading.Lock()

    def make() -> dict:
        with lock:
            made.append({"threads": set()})
            return made[-1]

    def fn(worker: dict, x: int) -> int:
        worker["threads"].add(threading.get_ident())
        time.sleep(0.002 * (x % 3))  # uneven items: the threads take them in no fixed order
        return x * x

    assert map_on_workers(make, fn, range(30), 2) == [x * x for x in range(30)]
    assert 1 <= len(made) <= 2 and all(len(w["threads"]) == 1 for w in made)
    assert len({t for w in made for t in w["threads"]}) == len(made)


def test_one_worker_runs_inline_and_errors_come_out():
    calls = []
    assert map_on_workers(lambda: calls.append(1) or "w", lambda w, x: (w, x), [1, 2], 1) == [("w", 1), ("w", 2)]
    assert calls == [1] and map_on_workers(lambda: None, lambda w, x: x, [], 2) == []

    def boom(worker, x):
        if x == 3:
            raise ValueError("item 3")
        return x

    with pytest.raises(ValueError, match="item 3"):
        map_on_workers(lambda: None, boom, range(6), 2)


def test_two_one_thread_whispers_transcribe_like_one_two_thread_whisper(tiny_pack, speech_dir, english_clips):
    """What the ASR gate relies on (calibration/gate.py): decoding on two threads changes no transcript."""
    view = StageView(tiny_pack.dir, tiny_pack.manifest["stages"], 2)
    audio = [read_audio(speech_dir / c["audio"]) for c in english_clips[:6]]

    def asr(threads: int):
        return view.asr(view.engine("asr", "encoder", threads=threads), view.engine("asr", "decoder", threads=threads))

    one = asr(2)
    plain = [one.transcribe(a, language="en").text for a in audio]
    both = map_on_workers(lambda: asr(1), lambda w, a: w.transcribe(a, language="en").text, audio, 2)
    assert both == plain and all(plain)
