"""SpeechQueue: back-pressure, first-output marks, barge-in (duck, pause, stop, continue, resay) and shedding."""

import numpy as np
import pytest

from edge_rt.audio.sinks import DUCK_GAIN, RingSink, TimelineSink
from edge_rt.loop.onset import OnsetOptions
from edge_rt.loop.output import SpeechQueue
from edge_rt.loop.trace import UtteranceTrace

RATE = 16000


def _queue(capacity: int = 1024) -> tuple[SpeechQueue, RingSink]:
    sink = RingSink(RATE, capacity=capacity)
    return SpeechQueue(sink), sink


def _speech(n: int, value: float = 1.0) -> np.ndarray:
    return np.full(n, value, np.float32)


def test_back_pressure_keeps_the_rest_and_marks_the_first_sample():
    q, sink = _queue(capacity=1024)
    tr = UtteranceTrace(1)
    q.add(tr, _speech(800), first=True)
    q.add(tr, _speech(800), first=False)
    q.push()
    assert sink.pending() == 1024 and q.backlog_s() == 1600 / RATE
    sink.consume(np.empty(512, np.float32), 5_000_000_000)
    assert tr.t_ns["first_output"] == 5_000_000_000
    q.push()
    assert sink.pending() == 1024 and q.backlog_s() == 1088 / RATE


def test_duck_lowers_the_speech_until_resume():
    q, sink = _queue()
    q.add(UtteranceTrace(1), _speech(600), first=True)
    q.push()
    assert q.playing()
    assert q.barge_in("duck") == []
    out = np.empty(256, np.float32)
    sink.consume(out, 0)
    np.testing.assert_allclose(out, DUCK_GAIN)
    q.resume()
    sink.consume(out, 0)
    np.testing.assert_allclose(out, 1.0)


@pytest.mark.parametrize("policy", ["pause", "resay"])  # resay holds as pause does; the loop may then stop it
def test_pause_plays_silence_and_then_every_sample_it_held(policy):
    q, sink = _queue(capacity=512)
    heard, waiting = UtteranceTrace(1), UtteranceTrace(2)
    speech = np.arange(1, 801, dtype=np.float32)
    q.add(heard, speech[:400], first=True)
    q.add(waiting, speech[400:], first=True)
    q.push()
    out = np.empty(256, np.float32)
    sink.consume(out, 0)  # the first utterance has begun playing
    played = [out.copy()]
    assert q.barge_in(policy) == []
    for _ in range(3):  # the person talks: silence, nothing read, no mark fires, the far end hears silence
        sink.consume(out, 1_000)
        np.testing.assert_array_equal(out, 0.0)
        q.push()
    assert "first_output" not in waiting.t_ns and sink.pending() == 512
    q.resume()
    while q.playing():
        sink.consume(out, 2_000_000)
        played.append(out.copy())
        q.push()
    np.testing.assert_array_equal(np.concatenate(played)[:800], speech)  # all of it, in order
    assert waiting.t_ns["first_output"] >= 2_000_000


def test_stop_drops_queued_and_unplayed_speech_and_names_the_unheard():
    q, sink = _queue(capacity=512)
    heard, unheard = UtteranceTrace(1), UtteranceTrace(2)
    q.add(heard, _speech(400), first=True)
    q.add(unheard, _speech(400), first=True)
    q.add(unheard, _speech(400), first=False)
    q.push()
    sink.consume(np.empty(256, np.float32), 0)  # the first utterance has begun playing
    dropped = q.barge_in("stop")
    assert dropped == [unheard]
    assert q.backlog_s() == 0 or sink.pending() > 0  # the flush happens in the callback
    out = np.empty(512, np.float32)
    sink.consume(out, 0)
    np.testing.assert_array_equal(out, 0)
    assert not q.playing() and "first_output" not in unheard.t_ns


def test_continue_changes_nothing_and_a_file_timeline_plays_on():
    q, sink = _queue()
    q.add(UtteranceTrace(1), _speech(300), first=True)
    q.push()
    assert q.barge_in("continue") == []
    out = np.empty(300, np.float32)
    sink.consume(out, 0)
    np.testing.assert_allclose(out, 1.0)
    timeline = SpeechQueue(TimelineSink(RATE, now_s=lambda: 0.0))
    timeline.add(UtteranceTrace(2), _speech(100), first=True)
    timeline.push()
    assert timeline.barge_in("stop") == [] and timeline.barge_in("duck") == []


def test_drop_oldest_only_when_another_utterance_waits():
    q, sink = _queue(capacity=256)
    a, b = UtteranceTrace(1), UtteranceTrace(2)
    q.add(a, _speech(300), first=True)
    q.push()  # 256 in the sink, 44 queued
    assert q.drop_oldest() is None
    q.add(b, _speech(100), first=True)
    assert q.drop_oldest() is a
    assert q.backlog_s() == pytest.approx((256 + 100) / RATE)


def test_a_first_clause_is_queued_from_where_it_sounds_and_later_clauses_whole():
    sink = RingSink(RATE, capacity=4096)
    q = SpeechQueue(sink, OnsetOptions(keep_ms=5))
    tr = UtteranceTrace(1)
    quiet_then_loud = np.concatenate([np.full(320, 1e-4, np.float32), _speech(100)])  # 20 ms at -80 dBFS
    q.add(tr, quiet_then_loud, first=True)
    q.add(tr, quiet_then_loud, first=False)  # a later clause keeps its lead: the voice's own pause
    q.push()
    assert sink.pending() == 80 + 100 + 420  # 5 ms of the lead kept
    out = np.empty(180, np.float32)
    sink.consume(out, 1_000_000_000)
    np.testing.assert_array_equal(out, np.r_[np.full(80, 1e-4, np.float32), _speech(100)])
    assert tr.t_ns["first_output"] == 1_005_000_000  # stamped when the first sample one can hear is played


def test_without_onset_options_the_lead_is_played_and_the_stamp_is_still_the_sound():
    sink = RingSink(RATE, capacity=4096)
    q = SpeechQueue(sink)
    tr = UtteranceTrace(1)
    q.add(tr, np.concatenate([np.full(320, 1e-4, np.float32), _speech(100)]), first=True)
    q.push()
    assert sink.pending() == 420
    out = np.empty(420, np.float32)
    sink.consume(out, 1_000_000_000)
    assert tr.t_ns["first_output"] == 1_020_000_000  # 20 ms of near-silence is no translated sound yet
    silent = UtteranceTrace(2)  # a clause that never sounds is stamped at its first sample, as before
    q.add(silent, np.full(100, 1e-4, np.float32), first=True)
    q.push()
    sink.consume(out[:100], 3)
    assert silent.t_ns["first_output"] == 3
