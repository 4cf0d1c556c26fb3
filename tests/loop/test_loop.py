"""The loop on real clips and real models, run as fast as possible (file source → timeline sink)."""

from __future__ import annotations

import pytest

from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.stages import Stages
from edge_rt.trace import EVENTS


@pytest.fixture(scope="module")
def stages(tiny_pack):
    return Stages.load(tiny_pack)


def _run(stages, audio, **kw):
    source = FastFileSource(audio)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    traces = Loop(stages, source, sink, LoopOptions(target="pt", **kw)).run()
    return traces, sink


def test_every_spoken_utterance_has_the_full_trace(stages, speech_dir):
    traces, sink = _run(stages, read_audio(speech_dir / "en_jfk.wav"))
    spoken = [t for t in traces if t.translation]
    assert len(spoken) >= 2
    for t in spoken:
        assert set(EVENTS) <= set(t.t_ns), t.t_ns.keys()
        assert t.start_sample < t.end_sample
        assert t.turn_latency_ms is not None and t.turn_latency_ms > 0
    assert len(sink.audio()) > 0


def test_speculation_reuses_the_pause_work_without_changing_the_result(stages, speech_dir):
    audio = read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav")
    spec, _ = _run(stages, audio)
    plain, _ = _run(stages, audio, speculate_after_ms=None)
    assert any(t.speculative for t in spec), "no utterance ended at a pause that speculation had decoded"
    assert not any(t.speculative for t in plain)
    assert [t.text for t in spec] == [t.text for t in plain]
    assert [t.translation for t in spec] == [t.translation for t in plain]


def test_early_commit_ends_complete_sentences_before_the_hangover(stages, speech_dir):
    traces, _ = _run(stages, read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav"), early_commit=True)
    assert "complete" in {t.end_reason for t in traces}
    for t in traces:
        if t.end_reason == "complete":
            assert t.text.rstrip().endswith((".", "?", "!"))


def test_speculation_must_come_before_the_hangover():
    with pytest.raises(ValueError, match="shorter than the hangover"):
        LoopOptions(target="pt", speculate_after_ms=400)
