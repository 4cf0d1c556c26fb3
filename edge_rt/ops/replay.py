"""``edge-rt replay DIR``: run a recorded session's input through the loop again, at its original pace.

The recorded input.wav is played by a :class:`~edge_rt.audio.sources.PacedFileSource`
(real time, capture index i = recorded sample i, so utterances keep their sample
positions) into a :class:`~edge_rt.audio.sinks.PacedFileSink` at the recorded
output rate. Utterances are matched by overlap of their speech spans, and
transcripts and latencies are compared with the recording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from edge_rt.ops.session import Session, SessionError
from edge_rt.loop.trace import UtteranceTrace, percentiles
from edge_rt.units import SAMPLE_RATE

__all__ = ["ReplayOptions", "compare", "replay_session"]


@dataclass(frozen=True)
class ReplayOptions:
    pack: str | None = None  # None: the pack the session was recorded with
    precision: str | None = None  # None: as recorded
    threads: int | None = None  # None: as recorded
    speed: float = 1.0  # >1 replays faster (latencies are then not comparable)
    tail_s: float = 2.0  # silence after the recording so its last utterance can end

    def __post_init__(self):
        if not 0.25 <= self.speed <= 8:
            raise SessionError(f"--speed must be between 0.25 and 8, got {self.speed}")


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


def word_errors(ref: str, hyp: str) -> int:
    """Word-level edit distance between two normalized texts."""
    a, b = normalize(ref).split(), normalize(hyp).split()
    prev = list(range(len(b) + 1))
    for i, wa in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, wb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (wa != wb))
        prev = cur
    return prev[-1]


def _overlap(a: dict, b: dict) -> int:
    return min(a["end_sample"], b["end_sample"]) - max(a["start_sample"], b["start_sample"])


@dataclass
class Comparison:
    rows: list[dict[str, Any]] = field(default_factory=list)
    recorded: int = 0
    replayed: int = 0

    @property
    def same_transcripts(self) -> bool:
        spoken = [r for r in self.rows if r["recorded"] is not None or r["replay"] is not None]
        return bool(spoken) and all(r["same_text"] for r in spoken)

    def as_dict(self) -> dict[str, Any]:
        def lat(side):
            return percentiles(r[side]["latency_ms"] for r in self.rows if r[side] is not None)

        return {"same_transcripts": self.same_transcripts, "recorded_utterances": self.recorded,
                "replayed_utterances": self.replayed, "latency_ms": {"recorded": lat("recorded"), "replay": lat("replay")},
                "utterances": self.rows}


def _side(t: dict | None) -> dict | None:
    if t is None:
        return None
    return {"utterance": t["utterance"], "text": t["text"], "translation": t["translation"],
            "latency_ms": t.get("turn_latency_ms"), "dropped": t.get("dropped", "")}


def compare(recorded: list[dict], replayed: list[dict]) -> Comparison:
    """Pair utterances by the largest overlap of their speech spans (sample indices), in order."""
    rec = [t for t in recorded if t.get("text")]
    rep = [t for t in replayed if t.get("text")]
    used: set[int] = set()
    rows = []
    for r in rec:
        best = max((i for i in range(len(rep)) if i not in used and _overlap(r, rep[i]) > 0),
                   key=lambda i: _overlap(r, rep[i]), default=None)
        p = rep[best] if best is not None else None
        if best is not None:
            used.add(best)
        rows.append(_row(r, p))
    rows += [_row(None, rep[i]) for i in range(len(rep)) if i not in used]
    rows.sort(key=lambda row: row["start_s"])
    return Comparison(rows, len(rec), len(rep))


def _row(r: dict | None, p: dict | None) -> dict[str, Any]:
    ref = r or p
    same = r is not None and p is not None and normalize(r["text"]) == normalize(p["text"])
    return {"start_s": round(ref["start_sample"] / SAMPLE_RATE, 2), "end_s": round(ref["end_sample"] / SAMPLE_RATE, 2),
            "recorded": _side(r), "replay": _side(p), "same_text": same,
            "word_errors": word_errors(r["text"], p["text"]) if r and p else None}


def replay_session(session: Session, options: ReplayOptions = ReplayOptions(), stages=None) -> list[UtteranceTrace]:
    """Run the recorded input through a fresh loop; returns the replay's traces."""
    from edge_rt.audio.sinks import PacedFileSink
    from edge_rt.audio.sources import PacedFileSource
    from edge_rt.loop.endpoint import EndpointOptions
    from edge_rt.loop.loop import Loop, LoopOptions
    from edge_rt.pipeline import StageOptions, load_stages
    from edge_rt.pack import BuiltPack

    h = session.header
    audio = session.input_audio()  # fail on a bad recording before loading models
    pack_h, opts = h.get("pack", {}), h.get("options", {})
    if stages is None:
        stages = load_stages(BuiltPack.load(options.pack or pack_h.get("name", "default")),
                             StageOptions(precision=options.precision or pack_h.get("precision", "fp32"),
                                          threads=options.threads or pack_h.get("threads", 2)))
    loop_options = LoopOptions(target=opts["to"], source=opts.get("from"),
                               endpoint=EndpointOptions(hangover_ms=opts.get("hangover_ms", 288)),
                               partials=opts.get("partials", True))
    rate = (h.get("output") or {}).get("rate") or SAMPLE_RATE
    source = PacedFileSource(audio, tail_s=options.tail_s, speed=options.speed)
    sink = PacedFileSink(rate)
    return Loop(stages, source, sink, loop_options).run()
