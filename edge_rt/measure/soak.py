"""``edge-rt bench --soak MINUTES``: the live loop on real speech and silence, at real time, for a long time.

A device left alone must not slowly run out of memory, fall behind or lose
audio. The soak replays the English clips of the speech set, each followed by
``silence_s`` of silence, round and round at real-time pace (a paced source,
like a microphone) into the full loop and a paced playback sink that discards
what it plays, and samples every ``sample_every_s``:

* RSS of the process (``/proc/self/statm``);
* capture lag: audio captured but not yet read by the worker (s);
* playback backlog: speech queued but not yet played (s);
* capture overruns (audio lost), utterances processed.

The verdict compares RSS at the end with RSS after a warm-up (one pass over
the clips, so every encoder bucket and arena size has been used once), and the
worst lag in the first and second half of the measured part.
Goal: RSS growth < 5 % after warm-up, no lag growth, zero overruns.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import PacedFileSink
from edge_rt.audio.sources import BLOCK, PacedSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.observer import LoopObserver
from edge_rt.units import SAMPLE_RATE

__all__ = ["SoakOptions", "PlaylistSource", "soak", "summarize", "rss_mb"]

MIN_WARMUP_S = 30.0  # ONNX Runtime arenas and Python's allocator settle in the first utterances
TAIL_S = 2.0  # silence after the last block, so the last utterance ends


@dataclass(frozen=True)
class SoakOptions:
    minutes: float = 30.0  # real time: the run takes this long
    pack: str = "default"
    precision: str = "int8"
    threads: int = 2
    backend: str = "auto"  # "cpu" | "tensorrt" | "auto": what runs the engines (edge_rt/backends/factory.py)
    clips: tuple[str, ...] = ()  # clip ids from manifest.jsonl; empty = every English clip
    target: str = "pt"  # the clips are English: spoken in Portuguese
    silence_s: float = 3.0  # silence after each clip (longer than the hangover, so utterances end)
    sample_every_s: float = 5.0  # how often RSS and lag are sampled
    warmup_s: float | None = None  # None: one pass over the clips, at least MIN_WARMUP_S
    speech_dir: Path | None = None

    def __post_init__(self):
        if self.minutes <= 0:
            raise ValueError(f"soak minutes must be > 0, got {self.minutes}")
        if self.silence_s < 0.5:
            raise ValueError(f"soak silence_s must be >= 0.5 s so each utterance ends, got {self.silence_s}")
        if self.sample_every_s <= 0:
            raise ValueError(f"soak sample_every_s must be > 0, got {self.sample_every_s}")
        if self.warmup_s is not None and not 0 <= self.warmup_s < self.minutes * 60:
            raise ValueError(f"soak warmup_s must be in [0, {self.minutes * 60:.0f}) s, got {self.warmup_s}")


class PlaylistSource(PacedSource):
    """Plays ``cycle`` (float32, 16 kHz) round and round at real-time pace for ``duration_s``, then silence.

    Like :class:`~edge_rt.audio.sources.PacedFileSource`, but the audio repeats,
    so a long run holds one pass in memory, not the whole run.
    """

    def __init__(self, cycle: np.ndarray, duration_s: float):
        super().__init__(name="soak-source")
        if len(cycle) < BLOCK:
            raise ValueError(f"a playlist cycle must hold at least {BLOCK} samples, got {len(cycle)}")
        # one block of wrap-around appended, so every block is one slice
        self._cycle = np.concatenate([cycle, cycle[:BLOCK]]).astype(np.float32)
        self._period = len(cycle)
        self._total = int(duration_s * SAMPLE_RATE)
        self._tail = int(TAIL_S * SAMPLE_RATE)
        self._silence = np.zeros(BLOCK, np.float32)

    def _block(self, k: int) -> np.ndarray | None:
        pos = k * BLOCK
        if pos >= self._total + self._tail:
            return None
        if pos < self._total:
            start = pos % self._period
            return self._cycle[start : start + BLOCK]
        return self._silence


def rss_mb() -> float:
    """Resident set size of this process now, MB (peak RSS where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Counter(LoopObserver):
    """Counts utterances as the loop reports them (worker thread; the sampler only reads ints)."""

    def __init__(self):
        self.utterances = self.spoken = self.dropped = 0

    def on_utterance(self, trace) -> None:
        self.utterances += 1
        if trace.translation and not trace.dropped:
            self.spoken += 1
        elif trace.dropped:
            self.dropped += 1


class _Sampler:
    """A thread that records RSS, lag and counters every ``every_s``; it only reads counters, never the loop's state.

    Lag is polled every ``POLL_S`` and each sample holds the worst value since the previous one,
    so a spike during a long decode is not missed between samples.
    """

    POLL_S = 0.05

    def __init__(self, loop: Loop, sink: PacedFileSink, counter: _Counter, every_s: float):
        self.samples: list[dict] = []
        self._loop, self._sink, self._counter, self._every = loop, sink, counter, every_s
        self._lag = self._backlog = 0.0  # worst since the last sample
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self.sample()

    def _poll(self) -> None:
        self._lag = max(self._lag, self._loop.source.ring.available() / SAMPLE_RATE)
        self._backlog = max(self._backlog, self._sink.pending() / self._sink.rate)

    def sample(self) -> None:
        self._poll()
        ring = self._loop.source.ring
        self.samples.append({
            "t_s": round(time.monotonic() - self._t0, 2),
            "rss_mb": round(rss_mb(), 1),
            "capture_lag_s": round(self._lag, 3),
            "playback_backlog_s": round(self._backlog, 3),
            "overruns": ring.stats.overruns,
            "utterances": self._counter.utterances,
        })
        self._lag = self._backlog = 0.0

    def _run(self) -> None:
        next_sample = self._t0 + self._every
        while not self._stop.wait(self.POLL_S):
            self._poll()
            if time.monotonic() >= next_sample:
                next_sample += self._every
                self.sample()


def summarize(samples: list[dict], warmup_s: float) -> dict:
    """RSS growth after the warm-up and lag in the first and second half of the measured part."""
    if not samples:
        raise ValueError("no soak samples to summarize")
    measured = [s for s in samples if s["t_s"] >= warmup_s] or samples[-1:]
    half = len(measured) // 2
    first, second = measured[: max(half, 1)], measured[half:]
    warm, end = measured[0]["rss_mb"], samples[-1]["rss_mb"]
    lags = np.array([s["capture_lag_s"] for s in measured])
    return {
        "rss_mb": {"start": samples[0]["rss_mb"], "warm": warm, "end": end,
                   "max": max(s["rss_mb"] for s in samples),
                   "growth_pct_after_warmup": round(100 * (end - warm) / warm, 2)},
        "capture_lag_s": {"max": float(lags.max()), "p95": round(float(np.percentile(lags, 95)), 3),
                          "first_half_max": max(s["capture_lag_s"] for s in first),
                          "second_half_max": max(s["capture_lag_s"] for s in second)},
        "playback_backlog_s": {"max": max(s["playback_backlog_s"] for s in measured)},
    }


def _cycle(options: SoakOptions) -> tuple[np.ndarray, list[str]]:
    from edge_rt.measure.bench import BenchOptions, load_clips

    clips = load_clips(BenchOptions(clips=options.clips, speech_dir=options.speech_dir))
    if not options.clips:
        clips = [c for c in clips if c["lang"] == "en"]
    silence = np.zeros(int(options.silence_s * SAMPLE_RATE), np.float32)
    parts = []
    for c in clips:
        parts += [read_audio(c["path"]), silence]
    return np.concatenate(parts), [c["id"] for c in clips]


def soak(options: SoakOptions, log: Callable[[dict], None] = lambda s: None) -> dict:
    """Run the soak (takes ``options.minutes`` of real time); returns the JSON-ready report."""
    from edge_rt.pipeline import StageOptions, load_stages
    from edge_rt.pack import BuiltPack

    stages = load_stages(BuiltPack.load(options.pack), StageOptions(precision=options.precision, backend=options.backend,
                                                                    threads=options.threads))
    cycle, ids = _cycle(options)
    duration_s = options.minutes * 60
    warmup_s = options.warmup_s
    if warmup_s is None:
        warmup_s = min(max(MIN_WARMUP_S, len(cycle) / SAMPLE_RATE), duration_s / 2)
    source = PlaylistSource(cycle, duration_s)
    sink = PacedFileSink(stages.tts.sample_rate(options.target), keep=False)
    counter = _Counter()
    loop = Loop(stages, source, sink, LoopOptions(target=options.target, keep_traces=100), observers=[counter])
    sampler = _Sampler(loop, sink, counter, options.sample_every_s)
    sampler.samples.append({"t_s": 0.0, "rss_mb": round(rss_mb(), 1), "capture_lag_s": 0.0,
                            "playback_backlog_s": 0.0, "overruns": 0, "utterances": 0})
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    sampler.start()
    log_thread_stop = threading.Event()

    def progress():
        seen = 1
        while not log_thread_stop.wait(1.0):
            while seen < len(sampler.samples):
                log(sampler.samples[seen])
                seen += 1

    reporter = threading.Thread(target=progress, name="soak-log", daemon=True)
    reporter.start()
    try:
        loop.run()
    finally:
        sampler.stop()
        log_thread_stop.set()
        reporter.join(2.0)
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    ring = source.ring.stats
    return {
        "mode": "soak",
        "pack": options.pack,
        "precision": options.precision,
        "minutes": options.minutes,
        "clips": ids,
        "silence_s": options.silence_s,
        "audio_s": round(duration_s, 1),
        "wall_s": round(wall, 1),
        "warmup_s": round(warmup_s, 1),
        "cpu_percent": round(100 * cpu / wall, 1) if wall else None,
        **summarize(sampler.samples, warmup_s),
        "capture": {"overruns": ring.overruns, "dropped_samples": ring.dropped},
        # playback underruns count every block of silence between utterances too; informational
        "playback": {"underrun_blocks": sink.ring.stats.underruns, "rejected_samples": sink.ring.stats.rejected},
        "utterances": {"total": counter.utterances, "spoken": counter.spoken, "dropped": counter.dropped,
                       "stage_errors": loop.stage_errors},
        "overload": loop.overload.as_dict(),
        "goal": "RSS growth < 5 % after warm-up, no lag growth, zero capture overruns",
        "samples": sampler.samples,
    }
