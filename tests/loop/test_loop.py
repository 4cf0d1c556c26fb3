"""The loop on real clips and real models, run as fast as possible (file source → timeline sink)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.pipeline import load_stages
from edge_rt.loop.trace import EVENTS


@pytest.fixture(scope="module")
def stages(tiny_pack):
    return load_stages(tiny_pack)


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


def test_speculation_synthesizes_the_first_clause_during_the_pause(stages, speech_dir, monkeypatch):
    """At a pause that becomes the end, the first clause was synthesized before the hangover ran out,
    and what is spoken is the same as without speculation."""
    audio = read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav")
    plain, plain_sink = _run(stages, audio, speculate_after_ms=None)
    synthesized: list[tuple[str, int]] = []  # (translation, capture position) of each first clause synthesized
    original = stages.tts.clauses
    source = FastFileSource(audio)

    def spy(text, lang):
        chunks = original(text, lang)
        first = next(chunks, None)
        synthesized.append((text, source.ring.read_index))
        return iter(() if first is None else [first, *chunks])

    monkeypatch.setattr(stages.tts, "clauses", spy)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    options = LoopOptions(target="pt")
    spec = Loop(stages, source, sink, options).run()
    hangover = options.endpoint.hangover_ms * 16000 // 1000
    ahead = [t for t in spec if t.speculative]
    assert ahead
    for t in ahead:  # its speech was synthesized inside the pause, before the end was declared, and only then
        at = [i for text, i in synthesized if text == t.translation]
        assert at and all(t.end_sample <= i < t.end_sample + hangover for i in at), (t.end_sample, at)
    assert [t.translation for t in spec] == [t.translation for t in plain]
    # The same speech (espeak-ng's formant voice varies by a few samples from call to call).
    voiced = lambda a: int(np.count_nonzero(a))  # noqa: E731 - wherever the timeline placed it
    assert voiced(sink.audio()) == pytest.approx(voiced(plain_sink.audio()), rel=0.01)


def test_early_commit_ends_complete_sentences_before_the_hangover(stages, speech_dir):
    traces, _ = _run(stages, read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav"), early_commit=True)
    assert "complete" in {t.end_reason for t in traces}
    for t in traces:
        if t.end_reason == "complete":
            assert t.text.rstrip().endswith((".", "?", "!"))


def test_speculation_must_come_before_the_hangover():
    with pytest.raises(ValueError, match="shorter than the hangover"):
        LoopOptions(target="pt", speculate_after_ms=400)
