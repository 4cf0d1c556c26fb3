"""Turn-taking figures on constructed traces and captions: talk-over, finish lag, live error rate."""

from __future__ import annotations

import pytest

from edge_rt.audio.clock import CaptureClock
from edge_rt.loop.trace import UtteranceTrace
from edge_rt.measure.turn_taking import CaptionLog, live_error_rates, turn_taking, turn_taking_summary
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

S = SAMPLE_RATE


def _clock() -> CaptureClock:
    clock = CaptureClock()
    clock.anchor(0, 0)  # sample n captured at n / 16000 s
    return clock


def _spoken(n: int, start_s: float, end_s: float, first_output_s: float | None) -> UtteranceTrace:
    tr = UtteranceTrace(n, start_sample=int(start_s * S), end_sample=int(end_s * S), translation="olá")
    if first_output_s is not None:
        tr.stamp("first_output", int(first_output_s * 1e9))
    return tr


def test_a_translation_after_the_final_end_is_no_talk_over():
    t = turn_taking([_spoken(1, 0.5, 3.0, 3.6)], _clock(), end=3 * S, last_played_ns=int(5.0e9))
    assert not t.talk_over and t.talked_over == () and t.over_by_ms is None
    assert t.finish_lag_ms == pytest.approx(2000)


def test_speaking_the_first_half_during_a_pause_is_talk_over():
    # the speaker paused 2.0-2.6 s; the loop ended utterance 1 there and spoke it at 2.4 s, before the end at 4 s
    traces = [_spoken(1, 0.5, 2.05, 2.4), _spoken(2, 2.6, 4.0, 4.5)]
    t = turn_taking(traces, _clock(), end=4 * S, last_played_ns=int(6.5e9), pauses=[(2 * S, int(2.6 * S))])
    assert t.talk_over and t.talked_over == (1,) and t.at_pause == (1,)
    assert t.over_by_ms == pytest.approx(1600)
    assert t.finish_lag_ms == pytest.approx(2500)
    # the same run on the clip without an inserted pause: still talk-over, but not at a pause
    plain = turn_taking(traces, _clock(), end=4 * S, last_played_ns=int(6.5e9))
    assert plain.talk_over and plain.at_pause == ()


def test_an_utterance_held_through_the_pause_is_not_talk_over_and_unplayed_ones_do_not_count():
    # ended inside the pause but spoken only after the final end (the policy held it): fine
    held = [_spoken(1, 0.5, 2.1, 4.3)]
    assert not turn_taking(held, _clock(), 4 * S, int(6e9), pauses=[(2 * S, int(2.6 * S))]).talk_over
    # dropped (never played) utterances are not talk-over; nothing played: no finish lag
    dropped = [_spoken(1, 0.5, 2.1, None)]
    t = turn_taking(dropped, _clock(), 4 * S, None)
    assert not t.talk_over and t.finish_lag_ms is None
    # an end a little before the pause (the dip at the insertion point) still counts as ending at the pause
    early_end = _spoken(1, 0.5, 2.0 - VAD_FRAME / S, 2.5)
    assert turn_taking([early_end], _clock(), 4 * S, int(6e9), pauses=[(2 * S, int(2.6 * S))]).at_pause == (1,)


def test_the_live_text_is_the_last_final_caption_of_each_utterance_in_order():
    log = CaptionLog()
    log("partial", 1, "en", "and so my")
    log("final", 2, "en", "ask not what your country")
    log("translation", 1, "pt", "e assim")
    log("final", 1, "en", "and so my fellow")
    log("final", 1, "en", " And so my fellow Americans, ")  # a later final of the same utterance replaces it
    log("final", 3, "en", "")
    assert log.final_text() == "And so my fellow Americans, ask not what your country"
    assert CaptionLog().final_text() == ""


def test_live_error_rates_score_against_the_reference_and_can_fail():
    ref = "And so my fellow Americans, ask not what your country can do for you"
    assert live_error_rates([("en", ref, ref.upper())])["en"] == {"metric": "wer", "value": 0.0, "clips": 1}
    half = live_error_rates([("en", ref, "and so my fellow americans")])["en"]["value"]
    assert half == pytest.approx(100 * 9 / 14, abs=0.01)  # 9 of 14 words deleted
    assert live_error_rates([("en", ref, "")])["en"]["value"] == 100.0  # nothing captioned: all deleted
    zh = live_error_rates([("zh", "今天天气很好", "今天天气")])["zh"]
    assert zh["metric"] == "cer" and zh["value"] == pytest.approx(100 * 2 / 6, abs=0.01)
    # corpus rate over clips of one language; clips without reference words are left out
    two = live_error_rates([("en", "one two three four", "one two three four"), ("en", "five six", ""), ("en", "", "x")])
    assert two["en"]["value"] == pytest.approx(100 * 2 / 6, abs=0.01) and two["en"]["clips"] == 2


def test_the_summary_rates_and_percentiles():
    def clip(i, over, at_pause, lag, text):
        return {"id": i, "lang": "en", "reference": "a b c d", "live_text": text,
                "turn_taking": {"talk_over": over, "at_pause": [1] if at_pause else [], "finish_lag_ms": lag}}

    clips = [clip("a", True, True, 1000.0, "a b c d"), clip("b", False, False, 2000.0, "a b"),
             clip("c", True, False, 3000.0, "a b c d"), clip("d", False, False, None, ""),
             {"id": "not-run", "lang": "en", "reference": "a", "live_text": "", "turn_taking": None}]
    s = turn_taking_summary(clips)
    assert s["clips_live"] == 4 and s["talk_over_rate"] == 0.5 and s["talk_over"] == ["a", "c"]
    assert s["talk_over_at_pause_rate"] == 0.25
    assert s["finish_lag_ms"]["p50"] == 2000.0 and 2800 < s["finish_lag_ms"]["p95"] <= 3000
    assert s["live_wer_en"] == pytest.approx(100 * 6 / 16, abs=0.01)
    assert turn_taking_summary([])["talk_over_rate"] is None
