"""Per-utterance timestamps, latency, percentiles and JSON lines.

Every event is stamped with ``time.monotonic_ns()``; audio positions are the
capture ring's sample indices. The turn latency users feel is the time from
the end of their speech to the first translated sample they can hear (over -60 dBFS: loop/onset.py)
handed to the device.
"""

from __future__ import annotations

import collections

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Iterable

import numpy as np

# Event names in the order they happen, each a monotonic-ns timestamp.
EVENTS = (
    "speech_start",  # capture time of the utterance's first speech sample
    "speech_end",  # capture time of its last speech sample
    "end_detected",  # the endpointer declared the end (after the hangover)
    "asr_final",  # final transcript ready
    "mt_done",  # translation ready
    "tts_first_chunk",  # first synthesized clause ready
    "first_output",  # first sounding translated sample (loop/onset.py) handed to the output device
)


@dataclass
class UtteranceTrace:
    utterance: int
    start_sample: int = 0  # capture sample index (16 kHz)
    end_sample: int = 0
    lang: str = ""
    text: str = ""
    translation: str = ""
    dropped: str = ""  # why the utterance produced no speech, if it did not
    end_reason: str = ""  # silence | complete | hangover | max_pause (turn policy) | max_length | flush
    speculative: bool = False  # the final hypothesis was computed during the pause, before the end
    redecoded: bool = False  # its words are a beam's, after a greedy decode Whisper was unsure of (redecode)
    split: bool = False  # its words are its pieces', after a decode that said too little for its length (split.py)
    lent: bool = False  # its words start in the utterance the unsure gate dropped before it (ContextOptions.lend_within_s)
    resaid: bool = False  # its translation is the whole sentence's, with the one it talked over (barge_in "resay")
    held_tail: bool = False  # its words are the held pause's second decode, with its tail (LoopOptions.held_postroll_ms)
    # it ended at a pause judged on its transcript's end mark in its own language, not its translation's
    # (TurnOptions.source_mark_langs)
    source_mark: bool = False
    t_ns: dict[str, int] = field(default_factory=dict)

    def stamp(self, event: str, t_ns: int) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown trace event {event!r}; events are {', '.join(EVENTS)}")
        self.t_ns.setdefault(event, t_ns)

    def interval_ms(self, a: str, b: str) -> float | None:
        if a in self.t_ns and b in self.t_ns:
            return (self.t_ns[b] - self.t_ns[a]) / 1e6
        return None

    @property
    def turn_latency_ms(self) -> float | None:
        """End of speech → first sounding translated sample at the device."""
        return self.interval_ms("speech_end", "first_output")

    def stages_ms(self) -> dict[str, float | None]:
        return {
            "endpoint_wait": self.interval_ms("speech_end", "end_detected"),
            "asr_final": self.interval_ms("end_detected", "asr_final"),
            "mt": self.interval_ms("asr_final", "mt_done"),
            "tts_first_chunk": self.interval_ms("mt_done", "tts_first_chunk"),
            "playback": self.interval_ms("tts_first_chunk", "first_output"),
        }

    def as_dict(self) -> dict:
        d = asdict(self)
        d["turn_latency_ms"] = self.turn_latency_ms
        d["stages_ms"] = self.stages_ms()
        return d


def percentiles(values: Iterable[float | None], qs=(50, 95, 99)) -> dict[str, float | None]:
    vals = np.array([v for v in values if v is not None], dtype=np.float64)
    if vals.size == 0:
        return {f"p{q}": None for q in qs}
    return {f"p{q}": float(np.percentile(vals, q)) for q in qs}


class TraceWriter:
    """Append one JSON line per finished utterance, flushed at once (survives a crash)."""

    def __init__(self, path: str | Path | None = None, stream: IO[str] | None = None):
        self._own = path is not None
        self._f = open(path, "a", encoding="utf-8") if path is not None else stream

    def write(self, trace: UtteranceTrace) -> None:
        if self._f is None:
            return
        self._f.write(json.dumps(trace.as_dict(), ensure_ascii=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        if self._own and self._f is not None:
            self._f.close()
        self._f = None


class TracePublisher:
    """Finished utterances: kept (the last ``keep`` of them), and written and told to observers once
    their first output was played (or they produced none), so the trace holds ``first_output``."""

    def __init__(self, keep: int | None, writer: "TraceWriter | None", observers):
        self.traces: list[UtteranceTrace] | collections.deque[UtteranceTrace] = (
            [] if keep is None else collections.deque(maxlen=keep))
        self.writer, self.observers = writer, tuple(observers)
        self._pending: collections.deque[UtteranceTrace] = collections.deque()

    def close(self, tr: UtteranceTrace) -> None:
        self.traces.append(tr)
        if self.writer is not None or self.observers:
            self._pending.append(tr)
        self.flush()

    def flush(self, force: bool = False) -> None:
        while self._pending:
            tr = self._pending[0]
            if not force and not tr.dropped and "first_output" not in tr.t_ns:
                return
            self._pending.popleft()
            if self.writer is not None:
                self.writer.write(tr)
            for o in self.observers:
                o.on_utterance(tr)

