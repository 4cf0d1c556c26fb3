"""Turn-taking figures of ``edge-rt bench``: talk-over, finish lag and the live captions' error rate.

Everything here reads only what any loop leaves behind (its utterance traces,
its caption events and when the sink played the last translated sample), never
the end-of-turn policy's internals, so the figures stay comparable when that
policy changes.

* **talk-over**: a translated utterance whose first sample was played before the
  speaker's *final* end of speech (the bench's oracle end; on the paused set the
  original end shifted by the inserted pauses). On the paused set it is also
  said whether that utterance ended inside an inserted pause (the loop took a
  word-search pause for the end of the turn).
* **finish lag**: the last translated sample played − the final end of speech.
* **live error rate**: the "final" captions of a clip (one per utterance, in
  order) joined and scored against the manifest reference with
  :mod:`edge_rt.measure.scoring` (WER; CER for languages written without spaces).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from edge_rt.loop.trace import UtteranceTrace, percentiles
from edge_rt.measure.scoring import error_rate, normalize
from edge_rt.units import VAD_FRAME

__all__ = ["CaptionLog", "TurnTaking", "turn_taking", "live_error_rates", "turn_taking_summary"]

# An utterance's recorded end may fall up to two VAD frames before the pause it ended in: the
# energy dip at the insertion point is already scored as silence by the endpointer.
PAUSE_SLACK = 2 * VAD_FRAME


class CaptionLog:
    """A loop ``on_caption`` callback that keeps every caption as ``(kind, utterance, lang, text)``."""

    def __init__(self):
        self.events: list[tuple[str, int, str, str]] = []

    def __call__(self, kind: str, utterance: int, lang: str, text: str) -> None:
        self.events.append((kind, utterance, lang, text))

    def final_text(self) -> str:
        """The last "final" caption of each utterance, in utterance order, joined by spaces."""
        finals: dict[int, str] = {}
        for kind, utterance, _, text in self.events:
            if kind == "final":
                finals[utterance] = text.strip()
        return " ".join(t for _, t in sorted(finals.items()) if t)


@dataclass(frozen=True)
class TurnTaking:
    """One clip's turn-taking: who spoke over whom and how long the translation ran past the speaker."""

    talked_over: tuple[int, ...]  # utterances whose first sample played before the final end of speech
    at_pause: tuple[int, ...]  # of those, the ones that ended inside an inserted pause (paused set only)
    over_by_ms: float | None  # how long before the final end the first of them started playing
    finish_lag_ms: float | None  # last translated sample played − final end of speech (None: nothing played)

    @property
    def talk_over(self) -> bool:
        return bool(self.talked_over)

    def as_dict(self) -> dict:
        r = lambda v: None if v is None else round(v, 1)  # noqa: E731
        return {"talk_over": self.talk_over, "talked_over": list(self.talked_over), "at_pause": list(self.at_pause),
                "over_by_ms": r(self.over_by_ms), "finish_lag_ms": r(self.finish_lag_ms)}


def turn_taking(traces: Sequence[UtteranceTrace], clock, end: int, last_played_ns: int | None,
                pauses: Sequence[tuple[int, int]] = ()) -> TurnTaking:
    """Talk-over and finish lag of one live run.

    Args:
        traces: the loop's utterance traces (``first_output`` and ``end_sample`` are read).
        clock: the source's capture clock (``ns(sample) -> monotonic ns``).
        end: the final end of speech, a capture sample index.
        last_played_ns: when the sink played the last translated sample (monotonic ns), None if never.
        pauses: ``[start, end)`` sample spans of inserted pauses (the paused set), else empty.
    """
    end_ns = clock.ns(end)
    over = [t for t in traces if "first_output" in t.t_ns and t.t_ns["first_output"] < end_ns]
    at_pause = [t for t in over if any(a - PAUSE_SLACK <= t.end_sample < b for a, b in pauses)]
    over_by = max((end_ns - t.t_ns["first_output"]) / 1e6 for t in over) if over else None
    lag = None if last_played_ns is None else (last_played_ns - end_ns) / 1e6
    return TurnTaking(tuple(t.utterance for t in over), tuple(t.utterance for t in at_pause), over_by, lag)


def live_error_rates(rows: Iterable[tuple[str, str, str]]) -> dict[str, dict]:
    """Corpus error rate of the live captions per language: ``{lang: {metric, value %, clips}}``.

    Args:
        rows: ``(lang, reference, live caption text)`` per clip; an empty caption counts as all deletions.
    """
    by_lang: dict[str, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for lang, ref, hyp in rows:
        if normalize(ref, lang):
            by_lang[lang][0].append(ref)
            by_lang[lang][1].append(hyp)
    out = {}
    for lang, (refs, hyps) in sorted(by_lang.items()):
        metric, value = error_rate(refs, hyps, lang)
        out[lang] = {"metric": metric, "value": value, "clips": len(refs)}
    return out


def turn_taking_summary(clips: Sequence[dict]) -> dict:
    """Talk-over rate, finish lag P50/P95 and live error rates over clip dicts that ran the live loop.

    Each dict holds ``lang``, ``reference``, ``live_text`` and ``turn_taking`` (:meth:`TurnTaking.as_dict`).
    """
    ran = [c for c in clips if c.get("turn_taking")]
    n = len(ran)
    over = [c["id"] for c in ran if c["turn_taking"]["talk_over"]]
    at_pause = [c["id"] for c in ran if c["turn_taking"]["at_pause"]]
    live = live_error_rates((c["lang"], c["reference"], c["live_text"]) for c in ran if c.get("reference"))
    return {
        "clips_live": n,
        "talk_over_rate": round(len(over) / n, 3) if n else None,
        "talk_over": over,
        "talk_over_at_pause_rate": round(len(at_pause) / n, 3) if n else None,
        "finish_lag_ms": percentiles((c["turn_taking"]["finish_lag_ms"] for c in ran), qs=(50, 95)),
        "live_wer": live,
        "live_wer_en": live["en"]["value"] if "en" in live else None,
    }
