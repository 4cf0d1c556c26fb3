"""Overload: compute slower than real time keeps lag bounded by the explicit policy (edge_rt/loop/overload.py).

The ASR is wrapped so that it takes longer than the speech it decodes, speech arrives at three times real
time, and playback runs at real time; a sampler thread records the capture lag and the playback backlog
every 50 ms. With the policy the lag stays under its bound and every utterance is accounted for; without the
drop level (control run) the same input leaves the worker far behind.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import PacedFileSink
from edge_rt.audio.sources import PacedFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.overload import OverloadOptions
from edge_rt.loop.stages import Stages
from edge_rt.pipeline import load_stages
from edge_rt.units import SAMPLE_RATE

SPEED = 3.0  # speech arrives this many times faster than real time
SLOWDOWN = 1.5  # ASR wall time per second of audio: 4.5 x slower than the arriving speech
CLIPS = ("en_librispeech_1089-134686-0001", "en_librispeech_1089-134691-0000", "en_fleurs_luna")  # 2-4 s each
# Thresholds scaled down with the clips (the defaults are 1.5 / 4 / 8 s), so a short run shows the policy.
POLICY = OverloadOptions(skip_optional_s=1.0, shorten_s=2.0, drop_s=3.0)


class SlowAsr:
    """The real ASR, then a sleep proportional to the audio: a device too slow for its model."""

    def __init__(self, asr):
        self._asr = asr
        self.longest_s = 0.0
        self.hurry = threading.Event()  # set: no more sleeping (end a control run quickly)

    def transcribe(self, audio, **kw):
        t0 = time.monotonic()
        result = self._asr.transcribe(audio, **kw)
        if not self.hurry.is_set():
            self.hurry.wait(max(0.0, SLOWDOWN * len(audio) / SAMPLE_RATE - (time.monotonic() - t0)))
        self.longest_s = max(self.longest_s, time.monotonic() - t0)
        return result

    def __getattr__(self, name):
        return getattr(self._asr, name)


class LagSampler:
    """Capture lag and playback backlog every 50 ms; with ``give_up`` it ends the run once the lag is 3 s past
    the bound the policy guarantees (a control run without the policy need not run to the end)."""

    def __init__(self, loop: Loop, sink: PacedFileSink, asr: SlowAsr, give_up: bool = False):
        self.samples: list[tuple[float, float, float]] = []  # (t, capture lag s, playback backlog s)
        self._loop, self._sink, self._asr, self._give_up = loop, sink, asr, give_up
        self.gave_up = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        t0 = time.monotonic()
        while not self._stop.wait(0.05):
            lag = self._loop.source.ring.available() / SAMPLE_RATE
            self.samples.append((time.monotonic() - t0, lag, self._sink.pending() / self._sink.rate))
            if self._give_up and not self.gave_up and lag > _bound(self._asr) + 3.0:
                self.gave_up = True
                self._asr.hurry.set()
                self._loop.stop()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)


@pytest.fixture(scope="module")
def speech(speech_dir) -> np.ndarray:
    gap = np.zeros(int(0.6 * SAMPLE_RATE), np.float32)
    parts = []
    for _ in range(4):
        for c in CLIPS:
            parts += [read_audio(speech_dir / f"{c}.wav"), gap]
    return np.concatenate(parts)  # ~43 s: twelve utterances with short pauses


def _overloaded(tiny_pack, speech, overload: OverloadOptions, give_up: bool = False):
    base = load_stages(tiny_pack)
    asr = SlowAsr(base.asr)
    stages = Stages(base.vad, asr, base.mt, base.tts)
    source = PacedFileSource(speech, tail_s=1.0, speed=SPEED)
    sink = PacedFileSink(stages.tts.sample_rate("pt"), keep=False)
    loop = Loop(stages, source, sink, LoopOptions(target="pt", source="en", overload=overload))
    with LagSampler(loop, sink, asr, give_up) as sampler:
        traces = loop.run()
    return loop, traces, sampler, asr


def _bound(asr: SlowAsr) -> float:
    """Worst capture lag the policy allows: the drop threshold, plus what arrives during one decode (and the
    translation and first clause that follow it, well under 0.5 s with the tiny pack)."""
    return POLICY.drop_s + SPEED * (asr.longest_s + 0.5)


def test_lag_stays_bounded_under_overload(tiny_pack, speech):
    loop, traces, sampler, asr = _overloaded(tiny_pack, speech, POLICY)
    samples = sampler.samples
    lags = np.array([s[1] for s in samples])
    backlog = np.array([s[2] for s in samples])
    bound = _bound(asr)
    fed = [s for s in samples if s[0] <= len(speech) / SAMPLE_RATE / SPEED]  # while speech was arriving
    half = len(fed) // 2
    first, second = max(s[1] for s in fed[:half]), max(s[1] for s in fed[half:])
    print(f"\ncapture lag (s of audio): max {lags.max():.1f} (1st half {first:.1f}, 2nd half {second:.1f}), "
          f"bound {bound:.1f}; playback backlog max {backlog.max():.1f} s; {loop.overload.as_dict()}")
    assert lags.max() <= bound, (lags.max(), bound)
    assert second <= first + SPEED * asr.longest_s  # no growth over time
    # the playback backlog: at most the drop threshold plus one translation's clauses
    assert backlog.max() <= POLICY.drop_s + 5.0
    s = loop.overload
    assert s.partials_skipped > 0 and s.utterances_dropped > 0  # the policy had to act: levels 1 and 3
    assert loop.source.ring.stats.overruns == 0  # the lag never reached the capture ring's end: nothing lost
    # every utterance is accounted for: spoken, or dropped with the reason named
    assert all(t.translation or t.dropped for t in traces), [(t.text, t.dropped) for t in traces]
    assert sum(t.dropped.startswith("overload: ") and "behind" in t.dropped for t in traces) == s.utterances_dropped
    # and it still works: compute for about a fifth of the speech, and some utterances are still decoded and spoken
    assert sum(not t.dropped.startswith("overload: ") for t in traces) >= 2
    assert any(t.translation and not t.dropped for t in traces)


def test_without_the_drop_level_the_same_load_leaves_the_worker_far_behind(tiny_pack, speech):
    """Control: the bound above is the policy's doing; without level 3 the lag keeps growing past it
    (the run is cut once it is 3 s past the bound)."""
    control = OverloadOptions(skip_optional_s=1.0, shorten_s=2.0, drop_s=1000.0)
    loop, traces, sampler, asr = _overloaded(tiny_pack, speech, control, give_up=True)
    lags = np.array([s[1] for s in sampler.samples])
    print(f"\nno drop level: capture lag max {lags.max():.1f} s of audio, bound {_bound(asr):.1f} s")
    assert sampler.gave_up and lags.max() > _bound(asr)
    assert loop.overload.utterances_dropped == 0


def test_policy_levels_are_ordered_and_validated():
    o = OverloadOptions(skip_optional_s=1.0, shorten_s=3.0, drop_s=6.0)
    assert [o.skip_optional(x) for x in (0.5, 2.0)] == [False, True]
    assert [o.shorten(x) for x in (2.0, 4.0)] == [False, True]
    assert [o.drop(x) for x in (5.0, 7.0)] == [False, True]
    for bad in (dict(skip_optional_s=0), dict(skip_optional_s=9.0), dict(shorten_s=9.0), dict(clauses=0)):
        with pytest.raises(ValueError, match="overload|clause"):
            OverloadOptions(**bad)
