"""Recording a live session for field tests: audio in and out, transcripts, translations, latency trace.

A session folder holds::

    session.json   header: pack, options, devices, start (and, once closed, end) time
    input.wav      captured audio, 16 kHz mono PCM16; sample i = capture index i
    output.wav     translated speech at the sink's rate, on the same timeline
    trace.jsonl    one line per utterance (UtteranceTrace.as_dict()), fsync'd as each one ends
    flight/        flight-recorder dumps (see flight.py)

Everything is written incrementally by one writer thread, so a crash or power
loss keeps the session up to the last utterance. The worker thread only
copies the hop it already has and puts it on a queue: audio callbacks are
never touched, and the worker never waits on the disk.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

import edge_rt
from edge_rt.atomic import atomic_write
from edge_rt.errors import EdgeRtError
from edge_rt.loop.observer import LoopObserver
from edge_rt.loop.trace import UtteranceTrace
from edge_rt.units import SAMPLE_RATE
from edge_rt.audio.wav_stream import StreamingWav, read_wav

__all__ = ["SessionRecorder", "RecordingSink", "Session", "SessionError", "new_session_dir"]

HEADER = "session.json"
INPUT = "input.wav"
OUTPUT = "output.wav"
TRACE = "trace.jsonl"
FLUSH_EVERY_S = 2.0  # audio is made durable at least this often, and at every utterance

_LOG = logging.getLogger(__name__)


class SessionError(EdgeRtError, ValueError):
    """A session folder is missing, unusable or not a recording."""


def new_session_dir(root: str | Path) -> Path:
    """A fresh ``root/session-YYYYmmdd-HHMMSS[-k]`` folder (the service records one per audio open)."""
    root = Path(root)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for k in range(1000):
        d = root / (f"session-{stamp}" + (f"-{k}" if k else ""))
        try:
            d.mkdir(parents=True)
            return d
        except FileExistsError:
            continue
    raise SessionError(f"cannot create a session folder under {root}: too many sessions this second")


def _prepare_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise SessionError(f"--record {path}: exists and is not a folder; choose a new folder")
    if (path / HEADER).exists():
        raise SessionError(f"--record {path}: already holds a session ({HEADER}); choose a new folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SessionError(f"--record {path}: cannot create the folder ({e}); choose a writable place") from e
    return path


def _fsync_line(f, line: str) -> None:
    f.write(line + "\n")
    f.flush()
    os.fsync(f.fileno())


class SessionRecorder(LoopObserver):
    """A loop observer that records the session; wrap the sink with :meth:`wrap_sink` to record the output.

    ``header`` goes into session.json as given (pack, options, devices...).
    With ``audio=False`` only the header and the trace are written.
    """

    def __init__(self, folder: str | Path, header: dict[str, Any], audio: bool = True):
        self.dir = _prepare_dir(Path(folder))
        self.audio = audio
        self._header = {"format": 1, "edge_rt_version": edge_rt.__version__,
                        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "started_unix": time.time(),
                        "input": {"file": INPUT if audio else None, "rate": SAMPLE_RATE},
                        "output": {"file": None, "rate": None}, **header}
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._source = None
        self._out_rate: int | None = None
        self.utterances = 0
        self.error: BaseException | None = None  # the writer's failure, if any (recording stops, the loop goes on)
        self._write_header()
        self._thread = threading.Thread(target=self._writer, name="session-writer", daemon=True)
        self._thread.start()

    # -- worker-thread side: copy and enqueue, nothing else ------------------
    def wrap_sink(self, sink):
        """The sink, recording what it accepts into output.wav (call before the loop starts)."""
        if not self.audio:
            return sink
        self._out_rate = sink.rate
        self._header["output"] = {"file": OUTPUT, "rate": sink.rate}
        self._write_header()
        self._q.put(("open_out", sink.rate))
        return RecordingSink(sink, self._enqueue_out, self.now_s)

    def now_s(self) -> float:
        """Seconds of capture audio so far (the session's timeline)."""
        return self._source.ring.written / SAMPLE_RATE if self._source is not None else 0.0

    def on_start(self, loop) -> None:
        self._source = loop.source

    def on_hop(self, first: int, samples: np.ndarray) -> None:
        if self.audio and self.error is None:  # after a write error nothing is queued: memory stays flat
            self._q.put(("in", first, samples.copy()))

    def on_utterance(self, trace: UtteranceTrace) -> None:
        self.utterances += 1
        if self.error is None:
            self._q.put(("utt", trace.as_dict()))

    def _enqueue_out(self, pos: int, samples: np.ndarray) -> None:
        if self.error is None:
            self._q.put(("out", pos, samples.copy()))

    # -- writer thread ---------------------------------------------------------
    def _writer(self) -> None:
        wav_in = StreamingWav(self.dir / INPUT, SAMPLE_RATE) if self.audio else None
        wav_out: StreamingWav | None = None
        trace = open(self.dir / TRACE, "a", encoding="utf-8")
        next_flush = time.monotonic() + FLUSH_EVERY_S
        try:
            while True:
                try:
                    item = self._q.get(timeout=0.5)
                except queue.Empty:
                    item = None
                if item is not None:
                    kind = item[0]
                    if kind == "close":
                        break
                    if kind == "in":
                        wav_in.pad_to(item[1])  # an overrun gap stays silent: the file keeps the clock
                        wav_in.append(item[2])
                    elif kind == "open_out":
                        wav_out = StreamingWav(self.dir / OUTPUT, item[1])
                    elif kind == "out" and wav_out is not None:
                        wav_out.pad_to(item[1])
                        wav_out.append(item[2])
                    elif kind == "utt":
                        for w in (wav_in, wav_out):
                            if w is not None:
                                w.flush()
                        _fsync_line(trace, json.dumps(item[1], ensure_ascii=False))
                if time.monotonic() >= next_flush:
                    next_flush = time.monotonic() + FLUSH_EVERY_S
                    for w in (wav_in, wav_out):
                        if w is not None:
                            w.flush()
        except (OSError, ValueError) as e:  # disk full, folder removed: stop recording, keep translating
            self.error = e
            _LOG.error("recording to %s stopped (%s); translation goes on", self.dir, e)
        finally:
            for w in (wav_in, wav_out):
                if w is not None:
                    try:
                        w.close()
                    except OSError as e:
                        self.error = self.error or e
            trace.close()

    def _write_header(self) -> None:
        text = json.dumps(self._header, ensure_ascii=False, indent=2) + "\n"
        atomic_write(self.dir / HEADER, lambda tmp: tmp.write_text(text, encoding="utf-8"))

    def close(self, **summary: Any) -> None:
        """Finish the files and record the end time and ``summary`` in session.json."""
        self._q.put(("close",))
        self._thread.join(30)
        self._header.update(ended_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), utterances=self.utterances,
                            duration_s=round(self.now_s(), 3), **summary)
        if self.error is not None:
            self._header["recording_error"] = str(self.error)
        try:
            self._write_header()
        except OSError as e:  # the disk is full: the header written at the start stays
            self.error = self.error or e
            _LOG.error("cannot finish %s (%s); its audio and trace hold what was written", self.dir / HEADER, e)


class RecordingSink:
    """Wraps a sink; what it accepts is also queued for output.wav at its place on the capture timeline."""

    def __init__(self, inner, record: Callable[[int, np.ndarray], None], now_s: Callable[[], float]):
        self.inner = inner
        self.rate = inner.rate
        self._record = record
        self._now_s = now_s

    def write(self, samples: np.ndarray) -> int:
        ahead = self.inner.pending()  # queued before these: they play after it
        n = self.inner.write(samples)
        if n:
            self._record(int(self._now_s() * self.rate) + ahead, samples[:n])
        return n

    def mark(self, on_first_output) -> None:
        self.inner.mark(on_first_output)

    def pending(self) -> int:
        return self.inner.pending()

    def start(self) -> None:
        self.inner.start()

    def stop(self) -> None:
        self.inner.stop()

    def __getattr__(self, name):  # ring, info, audio(): whatever the wrapped sink offers
        return getattr(self.inner, name)


@dataclass(frozen=True)
class Session:
    """A recorded session folder, read back for replay and reports."""

    dir: Path
    header: dict[str, Any]
    traces: list[dict[str, Any]]

    @classmethod
    def load(cls, folder: str | Path) -> "Session":
        d = Path(folder)
        if not (d / HEADER).is_file():
            raise SessionError(f"{d} is not a recorded session ({HEADER} is missing); "
                               f"record one with `edge-rt run --record {d} ...`")
        try:
            header = json.loads((d / HEADER).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise SessionError(f"{d / HEADER} is unreadable: {e}") from e
        traces = []
        if (d / TRACE).is_file():
            for line in (d / TRACE).read_text(encoding="utf-8").splitlines():
                try:
                    traces.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line cut by a crash: everything before it is whole
        return cls(d, header, traces)

    def input_audio(self) -> np.ndarray:
        if not (self.dir / INPUT).is_file():
            raise SessionError(f"{self.dir} has no {INPUT}: it was recorded without audio (record.audio = false)")
        audio, rate = read_wav(self.dir / INPUT)
        if rate != SAMPLE_RATE:
            raise SessionError(f"{self.dir / INPUT} is at {rate} Hz, expected {SAMPLE_RATE}")
        return audio

    def output_audio(self) -> tuple[np.ndarray, int] | None:
        return read_wav(self.dir / OUTPUT) if (self.dir / OUTPUT).is_file() else None

    def flight_dumps(self) -> list[Path]:
        return sorted(p for p in (self.dir / "flight").glob("*/events.json")) if (self.dir / "flight").is_dir() else []


def live_header(pack: str, precision: str, threads: int, options, source, sink,
                latency_budget_ms: float) -> dict[str, Any]:
    """session.json fields for a live run: what replay needs to run it again, and what a reader wants to know."""

    def device(obj) -> dict[str, Any] | None:
        info = getattr(obj, "info", None)
        if info is None:
            return None
        return {"index": info.index, "name": info.name, "hostapi": info.hostapi, "rate": getattr(obj, "rate", None)}

    return {
        "pack": {"name": pack, "precision": precision, "threads": threads},
        "options": {"to": options.target, "from": options.source, "hangover_ms": options.endpoint.hangover_ms,
                    "partials": options.partials, "latency_budget_ms": latency_budget_ms},
        "devices": {"in": device(source), "out": device(sink)},
    }


class Recording:
    """A session recorder plus its flight recorder: pass :attr:`observers` and :attr:`sink` to the loop."""

    def __init__(self, folder: str | Path, header: dict[str, Any], sink, audio: bool = True,
                 flight=None):
        from edge_rt.ops.flight import FlightOptions, FlightRecorder

        self.recorder = SessionRecorder(folder, header, audio=audio)
        self.flight = FlightRecorder(self.recorder.dir / "flight", flight or FlightOptions())
        self.sink = self.recorder.wrap_sink(sink)
        self.observers = [self.recorder, self.flight]

    @property
    def dir(self) -> Path:
        return self.recorder.dir

    def close(self, **summary: Any) -> None:
        self.flight.close()
        self.recorder.close(flight_dumps=[p.name for p in self.flight.dumps],
                            flight_write_errors=self.flight.write_errors, **summary)
