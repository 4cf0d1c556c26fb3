"""The endpointer over synthetic probability sequences (numbers, no audio)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.loop.endpoint import Endpointer, EndpointOptions
from edge_rt.units import VAD_FRAME


def run(ep: Endpointer, probs) -> list:
    events = []
    for i, p in enumerate(probs):
        events += [(e.kind, e.sample, e.reason) for e in ep.push(i, float(p))]
    return events


def test_start_with_preroll_and_end_after_hangover():
    o = EndpointOptions(hangover_ms=160, preroll_ms=64, start_frames=2)
    probs = [0.02] * 20 + [0.9] * 30 + [0.02] * 10
    ev = run(Endpointer(o), probs)
    assert ev[0] == ("start", 20 * VAD_FRAME - 1024, "")
    assert ev[1] == ("end", 50 * VAD_FRAME, "silence")
    assert len(ev) == 2


def test_pause_shorter_than_hangover_keeps_the_utterance():
    o = EndpointOptions(hangover_ms=288)
    probs = [0.02] * 5 + [0.9] * 20 + [0.05] * 6 + [0.9] * 20 + [0.02] * 12
    kinds = [k for k, *_ in run(Endpointer(o), probs)]
    assert kinds == ["start", "end"]


def test_single_blip_does_not_open():
    probs = [0.02] * 10 + [0.95] + [0.02] * 10
    assert run(Endpointer(EndpointOptions(start_frames=2)), probs) == []


def test_threshold_adapts_to_noisy_vad_output():
    rng = np.random.default_rng(0)
    ep = Endpointer(EndpointOptions(alpha=3.0))
    noise = np.clip(0.35 + 0.08 * rng.standard_normal(2000), 0, 1)  # a noisy room lifts p
    events = run(ep, noise)
    assert 0.55 < ep.threshold < 0.65  # mu + 3 sigma of the noise
    # occasional noise peaks above the base threshold (0.5) open nothing once adapted
    assert sum(1 for k, *_ in events if k == "start") <= 2
    # real speech (p ~ 0.95) still opens an utterance
    more = [(e.kind) for i, p in enumerate([0.97] * 10) for e in ep.push(2000 + i, p)]
    assert "start" in more


def test_max_length_splits_at_the_quietest_recent_frame():
    o = EndpointOptions(max_utterance_s=3.2, split_search_s=1.0, hangover_ms=288)
    probs = [0.9] * 300
    probs[80] = 0.55  # within the search window before frame 99 (3.2 s = 100 frames)
    ev = run(Endpointer(o), probs)
    assert ev[0][0] == "start"
    assert ev[1] == ("end", 80 * VAD_FRAME, "max_length")
    assert ev[2] == ("start", 80 * VAD_FRAME, "")
    # every piece is at most max length: nothing lost between pieces
    starts = [s for k, s, _ in ev if k == "start"]
    ends = [s for k, s, _ in ev if k == "end"]
    assert all(b - a <= o.max_frames * VAD_FRAME for a, b in zip(starts, ends))


def test_flush_closes_an_open_utterance():
    ep = Endpointer()
    run(ep, [0.9] * 10)
    assert [e.kind for e in ep.flush(10)] == ["end"]
    assert ep.flush(11) == []


@pytest.mark.parametrize("kw", [dict(base_threshold=0.9, max_threshold=0.8), dict(hangover_ms=10),
                                dict(split_search_s=30.0), dict(start_frames=0)])
def test_bad_options_are_named(kw):
    with pytest.raises(ValueError):
        EndpointOptions(**kw)


def test_hold_keeps_a_pause_open_past_the_hangover_and_names_the_reason():
    o = EndpointOptions(hangover_ms=160)  # 5 frames
    ep = Endpointer(o)
    events = run(ep, [0.02] * 5 + [0.9] * 20)
    ep.push(25, 0.02)
    ep.hold(20, "max_pause")
    later = [(e.kind, e.reason) for i in range(26, 60) for e in ep.push(i, 0.02)]
    assert later == [("end", "max_pause")]  # after 20 silent frames, not 5
    assert events[0][0] == "start"


def test_hold_lasts_one_pause_only():
    ep = Endpointer(EndpointOptions(hangover_ms=160))
    run(ep, [0.9] * 10)
    ep.push(10, 0.02)
    ep.hold(30, "max_pause")
    assert [e for i in range(11, 20) for e in ep.push(i, 0.02)] == []  # held
    ep.push(20, 0.9)  # speech resumes: the hold is gone
    ev = [(e.kind, e.reason) for i in range(21, 30) for e in ep.push(i, 0.02)]
    assert ev == [("end", "silence")]


def test_a_shorter_hold_ends_before_the_hangover():
    ep = Endpointer(EndpointOptions(hangover_ms=288))
    run(ep, [0.9] * 10)
    ep.push(10, 0.02)
    ep.hold(2, "complete")
    assert [(e.kind, e.sample, e.reason) for e in ep.push(11, 0.02)] == [("end", 10 * VAD_FRAME, "complete")]
    with pytest.raises(ValueError):
        ep.hold(0, "x")
