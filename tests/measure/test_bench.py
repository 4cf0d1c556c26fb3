"""The bench: which utterance is the turn (and when a clip failed), the oracle end of speech, turn-taking."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.clock import CaptureClock
from edge_rt.cli import build_parser
from edge_rt.cli.common import _turn_options
from edge_rt.loop.loop import LoopOptions
from edge_rt.loop.options import loudspeaker_mode
from edge_rt.loop.trace import UtteranceTrace
from edge_rt.loop.turn_policy import TurnOptions
from edge_rt.measure.bench import BenchOptions, PlayoutSink, bench, live_turn, oracle_end
from edge_rt.measure.paused import PauseOptions
from edge_rt.units import SAMPLE_RATE, VAD_FRAME

S = SAMPLE_RATE  # one second of samples


def _clock() -> CaptureClock:
    clock = CaptureClock()
    clock.anchor(0, 0)  # sample 0 captured at t = 0 ns: sample n at n / 16000 s
    return clock


def _spoken(n: int, start: int, first_output_s: float) -> UtteranceTrace:
    tr = UtteranceTrace(n, start_sample=start, translation="olá")
    tr.stamp("first_output", int(first_output_s * 1e9))
    return tr


def test_the_turn_is_the_utterance_holding_the_end_of_speech():
    traces = [_spoken(1, 0, 1.5), _spoken(2, 2 * S, 3.4)]
    turn = live_turn(traces, _clock(), end=3 * S)
    assert turn.status == "ok" and turn.trace.utterance == 2
    assert abs(turn.latency_ms - 400) < 1e-6


def test_a_dropped_last_utterance_fails_the_clip_instead_of_falling_back():
    dropped = UtteranceTrace(2, start_sample=2 * S, dropped="no speech recognised (silence or noise)")
    turn = live_turn([_spoken(1, 0, 1.5), dropped], _clock(), end=3 * S)
    assert turn.status == "failed" and turn.latency_ms is None
    assert "utterance 2" in turn.reason and "no speech recognised" in turn.reason
    # the same holds when the last utterance was translated but never reached the device
    unplayed = UtteranceTrace(2, start_sample=2 * S, translation="olá")
    assert live_turn([_spoken(1, 0, 1.5), unplayed], _clock(), end=3 * S).status == "failed"
    assert live_turn([], _clock(), end=3 * S).status == "failed"


def test_speech_played_before_the_oracle_end_is_early_not_a_latency():
    # the last "speech" frame (trailing noise at 4 s) came after the only translation had started playing
    turn = live_turn([_spoken(1, 0, 3.0)], _clock(), end=4 * S)
    assert turn.status == "early" and turn.latency_ms is None and "1000 ms" in turn.reason


def test_an_utterance_starting_after_the_end_is_not_the_turn():
    late = UtteranceTrace(3, start_sample=3 * S + 2 * VAD_FRAME, dropped="noise")
    turn = live_turn([_spoken(1, 0, 3.2), late], _clock(), end=3 * S)
    assert turn.status == "ok" and turn.trace.utterance == 1


class _FakeVadProbs:
    """Stands in for the VAD's per-frame probabilities only (the oracle's arithmetic is under test)."""

    def __init__(self, probs):
        self._p = np.asarray(probs, np.float32)

    def probabilities(self, audio):
        return self._p


def test_oracle_end_is_one_past_the_last_speech_region():
    # 10 frames (320 ms) of speech, a 160 ms gap, a 64 ms blip: the blip is no region (measure/oracle.py)
    probs = [0.1] * 2 + [0.9] * 10 + [0.2] * 5 + [0.6] * 2 + [0.1] * 3
    assert oracle_end(_FakeVadProbs(probs), np.zeros(len(probs) * 512, np.float32)) == 12 * 512
    probs = [0.1] * 2 + [0.9] * 10 + [0.1]  # speech to the last frame but one
    assert oracle_end(_FakeVadProbs(probs), np.zeros(len(probs) * 512, np.float32)) == 12 * 512
    assert oracle_end(_FakeVadProbs([0.1, 0.2]), np.zeros(1024, np.float32)) == 1024  # no speech: the clip end


def test_the_playout_sink_notes_when_the_last_translated_sample_was_played():
    sink = PlayoutSink(16_000, block=320)
    assert sink.last_played_ns is None
    sink.mark(lambda t_ns: None)  # the loop marks each utterance's first sample
    sink.write(np.ones(100, np.float32))
    out = np.empty(320, np.float32)
    sink.consume(out, t_ns=1_000_000_000)  # 100 real samples, then underrun silence
    assert sink.last_played_ns == 1_000_000_000 + 99 * 1_000_000_000 // 16_000
    sink.consume(out, t_ns=2_000_000_000)  # nothing left: silence is not translated speech
    assert sink.last_played_ns == 1_000_000_000 + 99 * 1_000_000_000 // 16_000
    assert out[:100].tolist() == [0.0] * 100


def test_bench_reports_turn_taking_on_real_clips_and_the_paused_set(tiny_pack):
    """One short real clip through the live loop, plain and paused (tiny pack): the figures are there and sane."""
    clip = "en_librispeech_1089-134686-0001"  # 3.3 s: "stuff it into you his belly counselled him"
    r = bench(BenchOptions(pack="tiny", clips=(clip,), baseline=False, tail_s=2.0, paused=PauseOptions(),
                           loudspeaker=True))
    c = r["clips"][0]
    assert c["reference"] and c["live_text"], c
    assert r["live_wer_en"] is not None and r["live_wer_en"] < 60, (r["live_wer"], c["live_text"])
    tt = c["turn_taking"]
    if c["status"] == "ok":  # a turn: the translation began after the end, so it also ended after it
        assert not tt["talk_over"] and tt["finish_lag_ms"] >= c["turn_latency_ms"] > 0
    assert r["talk_over_rate"] in (0.0, 1.0) and r["finish_lag_ms"]["p50"] == tt["finish_lag_ms"]
    p = r["paused"]
    assert p["skipped"] == {} and len(p["clips"]) == 1
    pc = p["clips"][0]
    (a, b), = pc["pauses"]["pauses_s"]
    assert b - a == pytest.approx(0.6, abs=1e-3) and pc["pauses"]["final_end_s"] > b
    assert pc["turn_taking"] is not None and p["live_wer"]["en"]["clips"] == 1
    # talk-over at the pause is counted the same way on the summary as on the clip
    assert p["talk_over_at_pause_rate"] == (1.0 if pc["turn_taking"]["at_pause"] else 0.0)
    # every translation was looked up in the phrase cache (one clip, nothing repeats: no hit)
    assert r["phrase_cache"]["lookups"] == c["phrase_cache"]["lookups"] >= 1 and r["phrase_cache"]["hits"] == 0
    assert r["loop_memory"] is None  # only with --memory (a fresh process: tests/measure/test_memory.py)
    assert r["loop"]["lead_s"] == pytest.approx(1.024)  # with --loudspeaker, both runs after the same silence
    # partials stopped at a pause (loop/pause_watch.py): summed over the clips, as each clip's loop counted them
    assert r["loop"]["partials_stopped"] == c["partials_stopped"] >= 0
    # the same clip again in loudspeaker mode, paired with the headset run (the ratio is bench's figure, not a test's)
    s = r["loudspeaker"]
    assert s["clips"][clip]["headset_ms"] == c["turn_latency_ms"]
    if c["turn_latency_ms"] and s["clips"][clip]["loudspeaker_ms"]:
        assert s["clips_paired"] == 1 and s["per_clip_median_ratio"] == pytest.approx(
            s["clips"][clip]["loudspeaker_ms"] / c["turn_latency_ms"], abs=1e-3) == pytest.approx(s["p50_ratio"], abs=1e-3)
        # the first clip runs headset first (every other one loudspeaker first)
        assert s["clips"][clip]["first"] == "headset" and s["per_clip_median_ratio_by_first"] == {
            "headset": s["per_clip_median_ratio"], "loudspeaker": None}
    # it heard its own playback (the live test's path, 6 dB down, 40 ms late) and still translated the speaker only:
    # the same words as the headset run, give or take one
    assert s["echo"] == {"gain_db": -6.0, "delay_ms": 40}
    assert s["frontend_ms_per_hop"] > 0  # the front end's time on the worker, reported (its size is bench's figure)
    # nothing it translated began after the clip's last speech: it never answered its own voice (the package stack
    # beside the same loudspeaker runs with --peer only: tests/measure/test_peer_echo.py)
    assert s["own_voice_turns"] == 0 and s["clips"][clip]["own_voice"] == [] and s["peer"] is None
    assert s["live_wer"]["en"]["clips"] == 1 and s["live_wer_en"] <= r["live_wer_en"] + 100 / 8 + 1e-6, s["clips"]
    assert s["talk_over_rate"] in (0.0, 1.0) and isinstance(s["clips"][clip]["talk_over"], bool)
    # the issues' targets judged on these figures (measure/targets.py): what this run measured gets a verdict,
    # the loop's memory (no --memory here) is not measured
    t = {x["name"]: x for x in r["targets"]}
    assert t["live English WER (the loop's captions)"]["value"] == pytest.approx(r["live_wer_en"])
    assert t["talk-over on the paused set"]["state"] in ("met", "not met")
    assert t["loudspeaker mode's turn latency P50 / the headset's"]["value"] == (
        None if s["p50_ratio"] is None else pytest.approx(s["p50_ratio"]))
    assert t["the loop's peak RSS after warm-up"]["state"] == "not measured"


def test_bench_lead_starts_the_clip_after_a_second_of_silence_and_measures_from_the_clip(tiny_pack, monkeypatch):
    """bench --lead: the live run's clip starts 1.024 s into the stream; the bench still measures its turn from the
    clip's own end of speech."""
    import edge_rt.measure.bench as bench_module

    leads, real = [], bench_module.run_clip

    def spy(*args, **kwargs):
        run = real(*args, **kwargs)
        leads.append(run.lead)
        return run
    monkeypatch.setattr(bench_module, "run_clip", spy)
    clip = "en_librispeech_1089-134686-0001"
    runs = [bench(BenchOptions(pack="tiny", clips=(clip,), baseline=False, tail_s=2.0, lead=lead)) for lead in (False, True)]
    assert leads == [0, 32 * 512] and [r["loop"]["lead_s"] for r in runs] == [0.0, pytest.approx(1.024)]
    plain, led = (r["clips"][0] for r in runs)
    assert plain["live_text"] and led["live_text"]
    if plain["status"] == led["status"] == "ok":  # measured from the clip's end: not a lead (1024 ms) apart
        assert abs(led["turn_latency_ms"] - plain["turn_latency_ms"]) < 1000, (plain, led)


def test_room_tone_fills_the_lead_and_the_tail_with_the_clip_s_own_background(tiny_pack, monkeypatch):
    """bench --room-tone: the source hands out the clip's room tone before and after it, never digital silence, and
    the clip itself unchanged where the lead says it starts."""
    import edge_rt.measure.bench as bench_module
    from edge_rt.measure.paused import PauseOptions, room_tone

    seen, real = [], bench_module.PacedFileSource

    def spy(audio, *args, **kwargs):
        seen.append((np.array(audio), kwargs))
        return real(audio, *args, **kwargs)
    monkeypatch.setattr(bench_module, "PacedFileSource", spy)
    clip = "en_librispeech_1089-134686-0001"
    r = bench(BenchOptions(pack="tiny", clips=(clip,), baseline=False, tail_s=2.0, lead=True, room_tone=True))
    assert r["loop"]["room_tone"] is True and r["clips"][0]["live_text"]
    (fed, kwargs), = seen
    original = bench_module.read_audio(bench_module.load_clips(BenchOptions(pack="tiny", clips=(clip,)))[0]["path"])
    lead, tail = 32 * 512, 2 * 16000
    assert kwargs.get("tail_s") == 0.0 and len(fed) == lead + len(original) + tail
    assert np.array_equal(fed[lead : lead + len(original)], original)
    _, level = room_tone(original, 16, PauseOptions(), np.random.default_rng(0))
    for part in (fed[64:lead - 64], fed[len(fed) - tail + 64 : -64]):  # inside the 5-ms fades
        rms_db = 10 * np.log10(np.mean(part.astype(np.float64) ** 2))
        assert np.count_nonzero(part == 0) < len(part) // 100 and abs(rms_db - level) < 3, (rms_db, level)


def test_the_loudspeaker_summary_splits_the_ratios_by_which_run_went_first():
    """bench --loudspeaker runs every other clip loudspeaker first: the per-clip ratios are also given per order."""
    from edge_rt.measure.bench import _loudspeaker_summary

    def clip(h, s, first):
        return {"id": first, "headset_ms": h, "loudspeaker_ms": s, "first": first, "lang": "en", "reference": "a b",
                "live_text": "a b", "turn_taking": {"talk_over": False, "at_pause": False, "finish_lag_ms": 1.0}}
    clips = {"a": clip(100, 150, "headset"), "b": clip(100, 110, "loudspeaker"), "c": clip(200, 320, "headset"),
             "d": clip(100, None, "loudspeaker"), "e": clip(300, 300, "loudspeaker")}
    s = _loudspeaker_summary(clips, None)
    assert s["per_clip_median_ratio_by_first"] == {"headset": 1.55, "loudspeaker": 1.05}
    assert s["per_clip_median_ratio"] == 1.3 and s["clips_paired"] == 4
    assert [s["clips"][k]["first"] for k in "abcde"] == ["headset", "loudspeaker"] * 2 + ["loudspeaker"]
    assert s["own_voice_turns"] == 0 and s["peer"] is None  # no --peer: the package stack did not run


def test_the_loudspeaker_summary_counts_each_stack_s_own_voice_and_scores_the_package_stack():
    """bench --loudspeaker --peer: turns made of each stack's own voice, and the package stack's turn latency and
    English WER over the stretches that were not its own voice."""
    from edge_rt.measure.bench import _loudspeaker_summary

    def clip(cid, lang, own, peer_own, peer_text, peer_ms):
        return {"id": cid, "headset_ms": 100, "loudspeaker_ms": 110, "first": "headset", "lang": lang,
                "reference": "a b c d", "live_text": "a b c d", "own_voice": own,
                "turn_taking": {"talk_over": False, "at_pause": False, "finish_lag_ms": 1.0},
                "peer": {"turn_ms": peer_ms, "own_voice": peer_own, "text": peer_text, "turns": []}}
    clips = {"x": clip("x", "en", [], ["a b c d"], "a b c", 2500.0),
             "y": clip("y", "en", ["oi"], [], "a b c d", 3500.0),
             "z": clip("z", "de", [], ["x", "y"], "not scored", None)}
    s = _loudspeaker_summary(clips, None)
    assert (s["own_voice_turns"], s["clips_with_own_voice"]) == (1, 1)
    p = s["peer"]
    assert (p["own_voice_turns"], p["clips_with_own_voice"], p["clips"]) == (3, 2, 3)
    assert p["turn_latency_ms"]["p50"] == 3000.0  # over the clips it answered
    assert p["live_wer_en"] == 12.5  # one word of the 8 English reference words missing; German not scored
    assert s["peer_half_duplex"] is None  # that stack muting its microphone did not run here
    clips["x"]["peer_half_duplex"] = {"turn_ms": 2400.0, "own_voice": [], "text": "a b c d", "turns": []}
    h = _loudspeaker_summary(clips, None)["peer_half_duplex"]
    assert (h["own_voice_turns"], h["clips"], h["live_wer_en"], h["turn_latency_ms"]["p50"]) == (0, 1, 0.0, 2400.0)


def test_the_ready_tone_is_not_counted_as_translated_speech():
    """PlayoutSink's finish lag is about translated speech: samples written before the first utterance's mark
    (the loudspeaker ready tone) do not set when the last translated sample played."""
    sink = PlayoutSink(16_000, block=320)
    sink.write(np.ones(800, np.float32))  # the tone: 2.5 blocks
    buf = np.empty(320, np.float32)
    for k in range(4):
        sink.consume(buf, k * 20_000_000)
    assert sink.last_played_ns is None
    sink.mark(lambda t: None)
    sink.write(np.ones(100, np.float32))
    sink.consume(buf, 4 * 20_000_000)
    assert sink.last_played_ns == 4 * 20_000_000 + 99 * 62_500  # its 100th sample, 1/16000 s apart


def test_loudspeaker_mode_is_run_s_loudspeaker_flags():
    """The bench's loudspeaker pass sets what `edge-rt run --loudspeaker` sets without other flags."""
    headset = LoopOptions(target="pt", turn=TurnOptions())
    loud = loudspeaker_mode(headset)
    assert loud.frontend is not None and loud.frontend.echo_cancellation and loud.barge_in == "resay"
    assert loud.turn == _turn_options(build_parser().parse_args(["run", "--to", "pt", "--loudspeaker"]))
    assert headset.frontend is None and headset.turn == TurnOptions()  # the headset run's options untouched
    assert loudspeaker_mode(LoopOptions(target="pt", turn=None)).turn is None  # --no-turn-policy stays plain
    assert loudspeaker_mode(headset, "duck").barge_in == "duck"  # `run --loudspeaker --barge-in duck`
    assert loud.frontend.ready_tone_ms > 0 and loudspeaker_mode(headset, ready_tone=False).frontend.ready_tone_ms == 0
    assert build_parser().parse_args(["run", "--to", "pt", "--loudspeaker", "--no-ready-tone"]).no_ready_tone
