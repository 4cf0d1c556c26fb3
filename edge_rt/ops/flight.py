"""Flight recorder: when an utterance misses its latency budget or a stage fails, keep the evidence.

The loop already keeps the last 65 s of capture audio (:class:`~edge_rt.loop.history.History`);
this observer keeps the last events (utterance traces, errors) in memory and,
on a miss or an error, dumps ``flight/<nnn>-<reason>-u<utterance>/`` with
``audio.wav`` (the last ``seconds`` of capture audio, 16 kHz) and
``events.json``. The worker only copies the audio slice; a thread writes it.
Dumps are capped per session so a device that is always late cannot fill its disk.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_rt.atomic import atomic_write
from edge_rt.errors import EdgeRtError
from edge_rt.loop.observer import LoopObserver
from edge_rt.loop.trace import UtteranceTrace
from edge_rt.units import SAMPLE_RATE
from edge_rt.audio.wav_stream import StreamingWav

__all__ = ["FlightOptions", "FlightOptionsError", "FlightRecorder"]


class FlightOptionsError(EdgeRtError, ValueError):
    """A flight-recorder option is out of range."""

MAX_SECONDS = 60.0  # History holds 65 s


@dataclass(frozen=True)
class FlightOptions:
    latency_budget_ms: float = 1500.0  # end of speech → first output; slower utterances are dumped
    seconds: float = 30.0  # capture audio per dump (at most 60)
    max_dumps: int = 50  # per session
    events: int = 200  # recent events kept in memory

    def __post_init__(self):
        if not 0 < self.seconds <= MAX_SECONDS:
            raise FlightOptionsError(f"flight recorder seconds (record.flight_s) must be in (0, {MAX_SECONDS:.0f}], "
                                     f"got {self.seconds}")
        if self.latency_budget_ms <= 0:
            raise FlightOptionsError(f"the latency budget (--latency-budget-ms, loop.latency_budget_ms) must be > 0, "
                                     f"got {self.latency_budget_ms}")


class FlightRecorder(LoopObserver):
    def __init__(self, folder: str | Path, options: FlightOptions = FlightOptions()):
        self.dir = Path(folder)
        self.options = options
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=options.events)
        self.dumps: list[Path] = []
        self._loop = None
        self._threads: list[threading.Thread] = []
        self.write_errors: list[str] = []  # dumps the disk refused (reported in session.json)

    def _event(self, kind: str, **data: Any) -> dict[str, Any]:
        e = {"kind": kind, "t_unix": round(time.time(), 3), "t_ns": time.monotonic_ns(), **data}
        self.events.append(e)
        return e

    def on_start(self, loop) -> None:
        self._loop = loop
        self._event("start")

    def on_utterance(self, trace: UtteranceTrace) -> None:
        d = trace.as_dict()
        self._event("utterance", trace=d)
        latency = trace.turn_latency_ms
        if latency is not None and latency > self.options.latency_budget_ms:
            self.dump("late", trace.utterance, latency_ms=round(latency, 1),
                      budget_ms=self.options.latency_budget_ms)

    def on_error(self, exc: BaseException, trace: UtteranceTrace | None) -> None:
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self._event("error", error=f"{type(exc).__name__}: {exc}", traceback=detail,
                    utterance=trace.utterance if trace else None)
        self.dump("error", trace.utterance if trace else 0, error=f"{type(exc).__name__}: {exc}")

    def dump(self, reason: str, utterance: int, **why: Any) -> Path | None:
        """Copy the audio and events now (worker thread); a thread writes them. None when capped."""
        if self._loop is None or len(self.dumps) >= self.options.max_dumps:
            return None
        history = self._loop.history
        end = history.end
        first = max(0, end - int(self.options.seconds * SAMPLE_RATE))
        audio = history.slice(first, end)
        ring = self._loop.source.ring.stats
        doc = {"reason": reason, "utterance": utterance, **why, "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "audio": {"file": "audio.wav", "rate": SAMPLE_RATE, "first_sample": first, "end_sample": end},
               "capture": {"overruns": ring.overruns, "dropped": ring.dropped},
               "events": list(self.events)}
        folder = self.dir / f"{len(self.dumps) + 1:03d}-{reason}-u{utterance}"
        self.dumps.append(folder)
        t = threading.Thread(target=self._write, args=(folder, audio, doc), name="flight-dump", daemon=True)
        t.start()
        self._threads.append(t)
        return folder

    def _write(self, folder: Path, audio: np.ndarray, doc: dict[str, Any]) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            wav = StreamingWav(folder / "audio.wav", SAMPLE_RATE)
            wav.append(audio)
            wav.close()
            text = json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n"
            atomic_write(folder / "events.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
        except OSError as e:  # a full disk must not take the translator down
            self.write_errors.append(f"{folder.name}: {e}")

    def close(self, timeout_s: float = 10.0) -> None:
        for t in self._threads:
            t.join(timeout_s)
