"""Test hook: make one stage (or the whole "machine") N times slower, to prove the perf check can fail.

``edge-rt bench`` reads ``EDGE_RT_BENCH_SLOWDOWN`` (or ``BenchOptions.slowdown``),
a comma-separated list of ``stage=factor``: ``asr=2`` makes every Whisper call take
twice its own time (it sleeps for ``(factor - 1)`` times what the call took);
``all=2`` does that to every stage and to the speed probe, i.e. a machine twice
as slow. Stages: vad, asr, mt, tts, probe (the probe only through ``all``).
Never set in production; it exists so the regression check has tests that fail.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable, Iterator

__all__ = ["Slowdown", "ENV", "STAGES"]

ENV = "EDGE_RT_BENCH_SLOWDOWN"
STAGES = ("vad", "asr", "mt", "tts", "probe")
MIN_SLEEP_S = 0.002  # shorter sleeps overshoot by a large fraction of themselves
# The methods of each stage the loop and the serial pipeline call.
_METHODS = {"vad": ("probabilities",), "asr": ("transcribe",), "mt": ("translate",), "tts": ("synthesize",)}


@dataclass(frozen=True)
class Slowdown:
    factors: tuple[tuple[str, float], ...] = ()  # (stage, factor >= 1)

    @classmethod
    def parse(cls, spec: str) -> "Slowdown":
        """``"asr=2"``, ``"asr=2,mt=1.5"`` or ``"all=2"``; "" is no slowdown."""
        from edge_rt.errors import EdgeRtError

        out: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, value = part.partition("=")
            try:
                factor = float(value)
            except ValueError:
                factor = 0.0
            if name not in STAGES + ("all",) or factor < 1:
                raise EdgeRtError(f"bad {ENV} entry {part!r}: write stage=factor with stage one of "
                                  f"{', '.join(STAGES)}, all and factor >= 1 (e.g. asr=2)")
            for s in (STAGES if name == "all" else (name,)):
                out[s] = factor
        return cls(tuple(sorted(out.items())))

    def factor(self, stage: str) -> float:
        return dict(self.factors).get(stage, 1.0)

    def __bool__(self) -> bool:
        return any(f != 1.0 for _, f in self.factors)

    def wrap_fn(self, stage: str) -> Callable[[Callable], Callable]:
        """A decorator that stretches each call of a function by this stage's factor."""
        factor = self.factor(stage)
        if factor == 1.0:
            return lambda fn: fn

        def wrap(fn):
            debt = 0.0  # seconds owed: short calls (a VAD hop) pay in sleeps of >= MIN_SLEEP_S, which are exact

            @functools.wraps(fn)
            def slowed(*args, **kwargs):
                nonlocal debt
                t0 = time.perf_counter()
                out = fn(*args, **kwargs)
                debt += (factor - 1) * (time.perf_counter() - t0)
                if debt >= MIN_SLEEP_S:
                    t1 = time.perf_counter()
                    time.sleep(debt)
                    debt -= time.perf_counter() - t1  # an oversleep is paid back on the next calls
                return out
            return slowed
        return wrap

    def stage(self, name: str, obj):
        """``obj`` (a stage) with its compute methods stretched, or ``obj`` itself when not slowed."""
        return obj if self.factor(name) == 1.0 else _Slowed(obj, name, self)


class _Slowed:
    """A stage whose compute calls take ``factor`` times as long; everything else passes through."""

    def __init__(self, inner, name: str, slowdown: Slowdown):
        self._inner, self._name = inner, name
        self._wrap = slowdown.wrap_fn(name)
        for method in _METHODS[name]:
            setattr(self, method, self._wrap(getattr(inner, method)))
        if name == "vad":
            self._hop = self._wrap(inner.__call__)
        if name == "tts":
            self.clauses = self._clauses

    def __call__(self, *args, **kwargs):  # the VAD is called per hop
        return self._hop(*args, **kwargs)

    def _clauses(self, text: str, lang: str) -> Iterator:
        it = self._inner.clauses(text, lang)
        step = self._wrap(lambda: next(it, None))
        while (chunk := step()) is not None:
            yield chunk

    def __getattr__(self, attr):
        return getattr(self._inner, attr)
