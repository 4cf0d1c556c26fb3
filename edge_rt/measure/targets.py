"""The open issues' speed, turn-taking and memory targets, judged on one `edge-rt bench` result.

A target is a limit on one figure of the result (every one here is an upper limit). The bench
prints the verdicts after its figures and puts them in its JSON (``targets``), so whoever runs it
on a device (a Jetson, say) sees at once which targets hold there. A figure that this run did not
measure (no ``--paused``, ``--memory`` or ``--loudspeaker``, or no clip measured) is "not measured",
never "met". The verdicts are for the run's own settings: a run with ``--lead``, ``--beam 5`` or
``--no-turn-policy`` judges that setting, not the defaults.

The noise targets of issue 11 (WER against faster-whisper at 5-10 dB, no empty clip) are
`edge-rt eval --noise --peer`'s, not the bench's, and are not judged here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["Target", "Verdict", "TARGETS", "judge", "MET", "NOT_MET", "NOT_MEASURED"]

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"


@dataclass(frozen=True)
class Target:
    """``value <= limit``, where value = the result's figure at ``path`` times ``scale``, in ``unit``."""

    name: str  # what a reader sees: "turn latency P50"
    issue: int  # the issue that set it
    limit: float
    unit: str  # "ms", "%", "MB", "s", "x" (a ratio)
    path: tuple[str, ...]  # keys into the bench result
    flag: str = ""  # the bench flag that measures it ("" = every run)
    scale: float = 1.0  # the figure times this is in ``unit`` (a rate 0..1 -> %)

    def __post_init__(self):
        if not self.path:
            raise ValueError(f"target {self.name!r} needs a path into the bench result")
        if self.scale <= 0:
            raise ValueError(f"target {self.name!r}: scale must be > 0, got {self.scale}")


@dataclass(frozen=True)
class Verdict:
    target: Target
    value: float | None  # in target.unit; None: not measured
    state: str  # MET | NOT_MET | NOT_MEASURED

    def as_dict(self) -> dict:
        t = self.target
        return {"name": t.name, "issue": t.issue, "limit": t.limit, "unit": t.unit, "flag": t.flag,
                "value": None if self.value is None else round(self.value, 3), "state": self.state}


# The limits are the issues' "What it must show" (issue 10: turn-taking; issue 11: field conditions).
TARGETS: tuple[Target, ...] = (
    Target("turn latency P50", 10, 200.0, "ms", ("turn_latency_ms", "p50")),
    Target("turn latency P95", 10, 450.0, "ms", ("turn_latency_ms", "p95")),
    Target("talk-over on the paused set", 10, 10.0, "%", ("paused", "talk_over_rate"), "--paused", 100.0),
    Target("live English WER (the loop's captions)", 10, 6.5, "%", ("live_wer_en",)),
    # The loop alone in a fresh process (measure/memory.py), not the bench process, which also holds the baselines.
    Target("the loop's peak RSS after warm-up", 11, 600.0, "MB", ("loop_memory", "peak_after_warmup_mb"), "--memory"),
    Target("the loop's cold start to ready", 11, 1.5, "s", ("loop_memory", "cold_start_s"), "--memory"),
    # "Turn latency within 10 % of the headset run": the P50s of the two runs of the same clips. The median of the
    # per-clip ratios, which moves less with the clips near the median, is in the result beside it.
    Target("loudspeaker mode's turn latency P50 / the headset's", 11, 1.10, "x", ("loudspeaker", "p50_ratio"),
           "--loudspeaker"),
    # "It never translates itself": utterances translated after a clip's last speech, where only the loop's own
    # playback sounds (LiveRun.own_voice). Over the bench's 2.5-s tail; with --peer over 15 s after each clip, the
    # whole reply (BenchOptions.echo_window_s). The live JACK test asserts the same (test_loudspeaker_jack.py).
    Target("loudspeaker mode: its own voice translated", 11, 0.0, "turns", ("loudspeaker", "own_voice_turns"),
           "--loudspeaker"),
)


def _figure(result: Mapping[str, Any], path: Sequence[str]) -> float | None:
    node: Any = result
    for key in path:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise ValueError(f"bench result {'.'.join(path)} is {node!r}, not a number")
    return None if math.isnan(node) else float(node)  # NaN: nothing was measured


def judge(result: Mapping[str, Any], targets: Sequence[Target] = TARGETS) -> list[Verdict]:
    """One verdict per target on ``result`` (the dict :func:`edge_rt.measure.bench.bench` returns)."""
    out = []
    for t in targets:
        v = _figure(result, t.path)
        if v is None:
            out.append(Verdict(t, None, NOT_MEASURED))
            continue
        v *= t.scale
        out.append(Verdict(t, v, MET if v <= t.limit else NOT_MET))
    return out
