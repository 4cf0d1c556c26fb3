"""The issues' targets judged on a bench result (edge_rt/measure/targets.py): pure logic over the result dict."""

import pytest

from edge_rt.measure.targets import MET, NOT_MEASURED, NOT_MET, TARGETS, Target, judge


def _result(**over):
    r = {"turn_latency_ms": {"p50": 180.0, "p95": 520.0}, "live_wer_en": 6.5, "paused": None,
         "loop_memory": None, "loudspeaker": None}
    r.update(over)
    return r


def _by_name(verdicts):
    return {v.target.name: v for v in verdicts}


def test_each_figure_is_judged_against_its_limit_and_the_limit_itself_is_met():
    v = _by_name(judge(_result()))
    assert v["turn latency P50"].state == MET and v["turn latency P50"].value == 180.0
    assert v["turn latency P95"].state == NOT_MET
    assert v["live English WER (the loop's captions)"].state == MET  # 6.5 is the limit: at it is within it


def test_what_the_run_did_not_measure_is_not_measured_never_met():
    v = _by_name(judge(_result(turn_latency_ms={"p50": None, "p95": float("nan")})))
    assert v["turn latency P50"].state == NOT_MEASURED and v["turn latency P50"].value is None
    assert v["turn latency P95"].state == NOT_MEASURED  # NaN: no figure either
    for name in ("talk-over on the paused set", "the loop's peak RSS after warm-up", "the loop's cold start to ready",
                 "loudspeaker mode's turn latency P50 / the headset's", "loudspeaker mode: its own voice translated"):
        assert v[name].state == NOT_MEASURED
        assert v[name].target.flag  # the verdict can say which flag measures it


def test_rates_are_judged_in_percent_and_the_optional_passes_when_present():
    r = _result(paused={"talk_over_rate": 0.563}, loop_memory={"peak_after_warmup_mb": 538.2, "cold_start_s": 0.5},
                loudspeaker={"p50_ratio": 1.176, "per_clip_median_ratio": 1.06, "own_voice_turns": 0})
    v = _by_name(judge(r))
    assert v["talk-over on the paused set"].value == pytest.approx(56.3)
    assert v["talk-over on the paused set"].state == NOT_MET
    assert v["the loop's peak RSS after warm-up"].state == MET
    assert v["the loop's cold start to ready"].state == MET
    assert v["loudspeaker mode's turn latency P50 / the headset's"].state == NOT_MET  # the P50s, not the per-clip
    assert v["loudspeaker mode: its own voice translated"].state == MET  # none: the limit is 0
    one = _by_name(judge(_result(loudspeaker={"own_voice_turns": 1})))["loudspeaker mode: its own voice translated"]
    assert one.state == NOT_MET and one.value == 1.0


def test_a_figure_that_is_not_a_number_is_an_error_naming_where_it_is():
    with pytest.raises(ValueError, match="turn_latency_ms.p50"):
        judge(_result(turn_latency_ms={"p50": "fast", "p95": 1.0}))


def test_a_target_needs_a_path_and_a_positive_scale():
    with pytest.raises(ValueError, match="path"):
        Target("x", 10, 1.0, "ms", ())
    with pytest.raises(ValueError, match="scale"):
        Target("x", 10, 1.0, "ms", ("a",), scale=0.0)


def test_the_dict_form_is_what_bench_json_carries():
    d = judge(_result(), TARGETS[:1])[0].as_dict()
    assert d == {"name": "turn latency P50", "issue": 10, "limit": 200.0, "unit": "ms", "flag": "", "value": 180.0,
                 "state": MET}
