"""The loop on real clips and real models, run as fast as possible (file source → timeline sink)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_rt.build.manifest import integer_products
from edge_rt.audio.files import read_audio
from edge_rt.audio.sinks import TimelineSink
from edge_rt.audio.sources import FastFileSource
from edge_rt.loop.context import ContextOptions
from edge_rt.loop.loop import Loop, LoopOptions
from edge_rt.loop.onset import OnsetOptions
from edge_rt.loop.phrase_cache import normalize
from edge_rt.loop.stages import Stages
from edge_rt.loop.turn_policy import TurnOptions
from edge_rt.measure.paused import PauseOptions, paused_clip
from edge_rt.pipeline import StageOptions, load_stages
from edge_rt.loop.trace import EVENTS

HANGOVER = LoopOptions(target="pt").endpoint.hangover_ms * 16000 // 1000  # samples


@pytest.fixture(scope="module")
def stages(tiny_pack):
    s = load_stages(tiny_pack)
    assert s.turn is not None  # the pack's end-of-turn model
    return s


@pytest.fixture(scope="module")
def product_stages(default_pack):
    """The default pack as `run` loads it (INT8): the turn policy's defaults were tuned on its Whisper,
    whose end-mark probability the tiny pack's Whisper gives less steadily (see turn_policy.py)."""
    return load_stages(default_pack, StageOptions(precision="int8"))


def _run(stages, audio, **kw):
    source = FastFileSource(audio)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    traces = Loop(stages, source, sink, LoopOptions(target="pt", **kw)).run()
    return traces, sink


def _run_seeing_ends(stages, audio, **kw):
    """The traces and, per end event, (end sample, capture samples read when it was declared, reason)."""
    source = FastFileSource(audio)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    loop = Loop(stages, source, sink, LoopOptions(target="pt", **kw))
    ends, on_event = [], loop._on_event

    def spy(event):
        if event.kind == "end":
            ends.append((event.sample, source.ring.read_index, event.reason))
        on_event(event)

    loop._on_event = spy
    return loop.run(), ends


def test_every_spoken_utterance_has_the_full_trace(stages, speech_dir):
    traces, sink = _run(stages, read_audio(speech_dir / "en_jfk.wav"))
    spoken = [t for t in traces if t.translation]
    assert len(spoken) >= 2
    for t in spoken:
        assert set(EVENTS) <= set(t.t_ns), t.t_ns.keys()
        assert t.start_sample < t.end_sample
        assert t.turn_latency_ms is not None and t.turn_latency_ms > 0
    assert len(sink.audio()) > 0


def test_a_breath_after_a_sentence_is_not_decoded_with_the_sentence(stages, speech_dir):
    """The ~0.25 s after JFK's last word (breath, room) opens an utterance of its own. Decoded together
    with the sentence before it (ContextOptions.joint), tiny.en writes one more word of that sentence
    ("... for your country. Ask"), which was then translated and spoken; too short to hold more than a
    word, it is decoded alone (ContextOptions.joint_min_s) and comes back as no speech."""
    from edge_rt.loop.endpoint import EndpointOptions

    jfk = read_audio(speech_dir / "en_jfk.wav")

    def short(**kw):
        # Without the post-roll (EndpointOptions.postroll_ms, off by default), as the failure was found: with it
        # this joint decode writes "." there, and the rule is tested on the case it was made for.
        traces, _ = _run(stages, jfk, endpoint=EndpointOptions(postroll_ms=0), **kw)
        return [t for t in traces if t.end_sample - t.start_sample < 0.4 * 16000]

    # Greedy only (the failure was greedy's; a beam over the joint audio writes "." there): LoopOptions.redecode off.
    joined = short(context=ContextOptions(joint_min_s=0.0), redecode=None)
    assert [t.text for t in joined] == ["Ask"]  # the failure (the test would otherwise prove nothing)
    alone = short(redecode=None)
    assert [(t.start_sample, t.end_sample) for t in alone] == [(t.start_sample, t.end_sample) for t in joined]
    assert [t.translation for t in alone] == [""] and all(t.dropped for t in alone), [t.text for t in alone]


def test_speculation_reuses_the_pause_work_without_changing_the_result(stages, speech_dir):
    audio = read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav")
    spec, _ = _run(stages, audio, turn=None)  # the policy would use the speculative text: other end points
    plain, _ = _run(stages, audio, speculate_after_ms=None, turn=None)
    assert any(t.speculative for t in spec), "no utterance ended at a pause that speculation had decoded"
    assert not any(t.speculative for t in plain)
    assert [t.text for t in spec] == [t.text for t in plain]
    assert [t.translation for t in spec] == [t.translation for t in plain]


def test_speculation_synthesizes_the_first_clause_during_the_pause(stages, speech_dir, monkeypatch):
    """At a pause that becomes the end, the first clause was synthesized before the hangover ran out,
    and what is spoken is the same as without speculation."""
    audio = read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav")
    plain, plain_sink = _run(stages, audio, speculate_after_ms=None, turn=None)
    synthesized: list[tuple[str, int]] = []  # (translation, capture position) of each first clause synthesized
    original = stages.tts.clauses
    source = FastFileSource(audio)

    def spy(text, lang, **kw):
        chunks = original(text, lang, **kw)
        first = next(chunks, None)
        synthesized.append((text, source.ring.read_index))
        return iter(() if first is None else [first, *chunks])

    monkeypatch.setattr(stages.tts, "clauses", spy)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    options = LoopOptions(target="pt", turn=None)
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


class _HeardLengths:
    """The stages' Whisper, recording how many samples each decode was given."""

    def __init__(self, asr):
        self._asr, self.lengths = asr, []

    def transcribe(self, audio, **kw):
        self.lengths.append(len(audio))
        return self._asr.transcribe(audio, **kw)

    def with_options(self, options):
        other = _HeardLengths(self._asr.with_options(options))
        other.lengths = self.lengths
        return other

    def __getattr__(self, name):
        return getattr(self._asr, name)


def test_whisper_hears_the_post_roll_after_the_last_speech_frame(product_stages, speech_dir):
    """"And so, my fellow Americans, [1 s pause] ask not ...": Silero calls the final /s/ of "Americans" silence,
    and Whisper given the audio up to the last speech frame wrote "my fellow American" (en_jfk, live and in
    `translate`). With EndpointOptions.postroll_ms the loop decodes that much more; the utterance's end does not move."""
    import copy

    from edge_rt.loop.endpoint import EndpointOptions

    jfk = read_audio(speech_dir / "en_jfk.wav")
    runs, on = {}, 64  # off by default: see EndpointOptions.postroll_ms
    for ms in (0, on):
        stages = copy.copy(product_stages)
        stages.asr = heard = _HeardLengths(product_stages.asr)
        # the held pause's second decode off (LoopOptions.held_postroll_ms, off by default): it would hear the same
        # tail at this pause
        traces, _ = _run(stages, jfk, partials=False, endpoint=EndpointOptions(postroll_ms=ms), held_postroll_ms=None)
        runs[ms] = traces, heard.lengths
    (plain, plain_heard), (padded, padded_heard) = runs[0], runs[on]
    print([t.text for t in plain], [t.text for t in padded])
    assert [(t.start_sample, t.end_sample) for t in padded] == [(t.start_sample, t.end_sample) for t in plain]
    first = padded[0]
    assert first.speculative  # the speculation at the pause had heard the post-roll: its work was used
    tail = EndpointOptions(postroll_ms=on).postroll_samples
    assert tail == 1024 and first.end_sample - first.start_sample + tail in padded_heard
    assert first.end_sample - first.start_sample not in padded_heard
    assert first.end_sample - first.start_sample in plain_heard
    assert "americans" in normalize(first.text).split(), first.text
    if "americans" in normalize(plain[0].text).split():
        pytest.skip(f"this build's Whisper writes 'Americans' without the post-roll too ({plain[0].text!r}); "
                    "the post-roll's audio was checked above")


def test_a_held_pause_is_decoded_again_with_its_tail_and_the_turn_evidence_stays(product_stages, speech_dir):
    """en_jfk's pause after "And so my fellow Americans" is held by Whisper's end mark (0.34 < mark_incomplete): it
    cannot end before max_pause_ms, so with LoopOptions.held_postroll_ms (off by default) the loop decodes the
    utterance once more with that much of the pause, and that decode (which hears the soft /s/ the VAD called
    silence) is what the end says. The turn policy is not told: every utterance ends where and why it ended without
    the second decode."""
    import copy

    jfk = read_audio(speech_dir / "en_jfk.wav")
    runs = {}
    for held in (None, 64):  # off by default (see LoopOptions.held_postroll_ms)
        stages = copy.copy(product_stages)
        stages.asr = heard = _HeardLengths(product_stages.asr)
        traces, ends = _run_seeing_ends(stages, jfk, partials=False, held_postroll_ms=held)
        runs[held] = traces, ends, heard.lengths
    (plain, plain_ends, _), (again, again_ends, lengths) = runs[None], runs[64]
    print([(t.text, t.end_reason) for t in plain], [(t.text, t.end_reason, t.held_tail) for t in again])
    assert [(e[0], e[2]) for e in again_ends] == [(e[0], e[2]) for e in plain_ends]  # same ends, same reasons
    assert [(t.start_sample, t.end_sample) for t in again] == [(t.start_sample, t.end_sample) for t in plain]
    first = again[0]
    assert first.end_reason == "max_pause", "premise: the pause after 'Americans' is held (Whisper's end mark)"
    assert first.held_tail and first.speculative  # the second decode, done in the pause, was what the end said
    n = first.end_sample - first.start_sample
    assert n in lengths and n + 1024 in lengths  # the speculation as before, then 64 ms more
    assert not any(t.held_tail for t in plain)
    assert "americans" in normalize(first.text).split(), first.text
    assert [t.text for t in again[1:]] == [t.text for t in plain[1:]]
    if "americans" in normalize(plain[0].text).split():
        pytest.skip(f"this build's Whisper writes 'Americans' without the tail too ({plain[0].text!r}); "
                    "the second decode and its audio were checked above")


def test_no_post_roll_at_a_max_length_split_and_never_past_the_capture(stages):
    """The next utterance starts where a max-length split cuts: its words are not the previous one's tail."""
    from edge_rt.loop.endpoint import EndpointOptions

    def loop(**kw):
        made = Loop(stages, FastFileSource(np.zeros(16000, np.float32)), TimelineSink(22050, now_s=lambda: 0.0),
                    LoopOptions(target="pt", **kw))
        made.history.write(0, np.zeros(20000, np.float32))
        return made

    on = loop(endpoint=EndpointOptions(postroll_ms=64))
    assert on._postroll(10000) == 1024
    assert on._postroll(10000, "max_length") == 0
    assert on._postroll(19500, "flush") == 500  # the end of the input: what there is
    assert on._postroll(20000) == 0
    assert loop()._postroll(10000) == 0  # off by default
    with pytest.raises(ValueError, match="postroll_ms"):
        EndpointOptions(postroll_ms=-1)


def test_a_complete_sentence_ends_before_the_hangover(product_stages, speech_dir):
    """Judged complete, the sentence ends at TurnOptions.complete_after_ms of pause, with the work done at
    the pause (whose own time, on a CPU, is longer than that wait)."""
    # Whisper's mark after "... the dreams built around it." is 0.93-0.96 (>= mark_complete): complete whatever
    # Smart Turn says as the pause goes on ("He could wait no longer." ends on the model: 0.97 at 64 ms, 0.91
    # at 192 ms, which is unsure, so it ends at the hangover).
    # The clip is two sentences; the pause after the first ("It was the first great sorrow of his life.") ends it
    # too on some builds (an AVX2-only CPU's INT8 decoder: its mark there is higher), which is right: it is complete.
    traces, ends = _run_seeing_ends(product_stages, read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav"))
    assert len(traces) in (1, 2) and all(t.text for t in traces), [t.text for t in traces]
    assert traces[-1].text.endswith("built around it."), [t.text for t in traces]
    assert all(t.text.endswith(".") for t in traces), [t.text for t in traces]
    end, declared, reason = ends[-1]
    assert reason == "complete" and traces[-1].end_reason == "complete"
    after = TurnOptions().complete_after_ms * 16
    assert declared - end <= after + 512 and declared - end < HANGOVER, \
        f"declared {(declared - end) / 16:.0f} ms after the speech"
    assert traces[-1].speculative  # the decode, translation and first clause done at the pause were used


def test_the_turn_model_runs_at_the_pause_lengths_whose_answers_decide(product_stages, speech_dir, monkeypatch):
    """The loop calls the end-of-turn model only at TurnPolicy.model_frames (not at 64 ms with the defaults, whose
    answer the call at 192 ms replaces before any pause can end), and the sentence still ends as complete."""
    source = FastFileSource(read_audio(speech_dir / "en_librispeech_1995-1837-0001.wav"))
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    loop = Loop(product_stages, source, sink, LoopOptions(target="pt"))
    at, probability = [], product_stages.turn.probability

    def spy(audio):
        at.append(loop.endpointer.silence_frames)
        return probability(audio)

    monkeypatch.setattr(product_stages.turn, "probability", spy)
    traces = loop.run()
    assert at and set(at) <= {6, 12, 24}, at
    assert traces[-1].end_reason == "complete", [(t.text, t.end_reason) for t in traces]


def test_a_short_pause_after_a_clause_stays_inside_the_sentence(product_stages, speech_dir):
    """en_fleurs_1938 reads "... protocol for infection control | including separating the patient | from
    others ..." with pauses of ~0.2-0.3 s, where Whisper's speculation reads a finished sentence: ended at
    64 ms of pause (the earlier default) it is cut there and its halves are translated apart (spoken over the
    speaker live); at the default the speaker goes on before the pause ends the turn."""
    audio = read_audio(speech_dir / "en_fleurs_1938.wav")
    early, _ = _run_seeing_ends(product_stages, audio, turn=TurnOptions(complete_after_ms=64))
    assert len([t for t in early if t.text]) >= 2, [t.text for t in early]  # else the test shows nothing
    traces, _ = _run_seeing_ends(product_stages, audio)
    said = [t for t in traces if t.text]
    assert len(said) == 1, [(t.text, t.end_reason) for t in said]
    assert "including" in said[0].text and "infection" in said[0].text, said[0].text


def test_a_hesitation_mid_sentence_does_not_end_the_utterance(product_stages, speech_dir):
    """0.6 s of the clip's own room tone spliced between two words: with the plain hangover the sentence
    is cut there; with the turn policy it is one utterance holding words from both sides."""
    clip = paused_clip("en_librispeech_1089-134691-0001",
                       read_audio(speech_dir / "en_librispeech_1089-134691-0001.wav"),
                       product_stages.vad, PauseOptions(pause_ms=600))
    (a, b), = clip.pauses

    def cut_in_hesitation(ends):
        return [e for e, _, _ in ends if a - 4000 <= e < b]

    _, plain = _run_seeing_ends(product_stages, clip.audio, turn=None)
    assert cut_in_hesitation(plain), "the plain hangover should end in the hesitation (else the test shows nothing)"
    traces, ends = _run_seeing_ends(product_stages, clip.audio)
    assert not cut_in_hesitation(ends), ends
    across = [t for t in traces if t.start_sample < a and t.end_sample > b]
    assert len(across) == 1, [(t.start_sample, t.end_sample, t.text) for t in traces]
    words = across[0].text.lower()
    assert "hour" in words and "waiting" in words, words  # "For a full hour he had paced up | and down, waiting"


def test_without_a_turn_model_the_transcript_and_pauses_decide(stages, speech_dir):
    """Hand-built stages without the end-of-turn model: the policy still holds and falls back; with
    Whisper's end-mark rule off nothing ends as "complete" (a printed period alone is not trusted)."""
    bare = Stages(stages.vad, stages.asr, stages.mt, stages.tts)
    assert getattr(bare, "turn", None) is None
    traces, ends = _run_seeing_ends(bare, read_audio(speech_dir / "en_jfk.wav"),
                                    turn=TurnOptions(mark_complete=None))
    assert {r for _, _, r in ends} <= {"hangover", "max_pause", "flush"}, ends
    assert any(t.translation for t in traces)
    for end, declared, reason in ends:
        if reason == "hangover":
            assert declared - end >= HANGOVER - 512  # never sooner than the endpointer's own hangover


def test_the_held_pause_cannot_be_shorter_than_the_hangover():
    with pytest.raises(ValueError, match="max_pause_ms"):
        LoopOptions(target="pt", turn=TurnOptions(max_pause_ms=200, complete_after_ms=64))


def test_speculation_must_come_before_the_hangover():
    with pytest.raises(ValueError, match="shorter than the hangover"):
        LoopOptions(target="pt", speculate_after_ms=400)


def _twice(audio: np.ndarray, gap_s: float = 1.5) -> np.ndarray:
    return np.concatenate([audio, np.zeros(int(gap_s * 16000), np.float32), audio])


def test_a_repeated_phrase_comes_from_the_phrase_cache(stages, speech_dir):
    """The same sentence twice: the second is not translated or its first clause synthesized again,
    and it says the same; with the cache off both are computed."""
    audio = _twice(read_audio(speech_dir / "en_librispeech_1089-134686-0000.wav")[: 16000 * 4])
    source = FastFileSource(audio)
    sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
    loop = Loop(stages, source, sink, LoopOptions(target="pt", turn=None, partials=False))
    traces = [t for t in loop.run() if t.translation]
    assert len(traces) >= 2 and normalize(traces[0].text) == normalize(traces[-1].text)  # punctuation may differ
    assert traces[-1].translation == traces[0].translation
    stats = loop.phrases.stats
    assert stats.hits >= 1 and stats.audio_hits >= 1 and stats.saved_ms > 0, stats
    source = FastFileSource(audio)
    off = Loop(stages, source, TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000),
               LoopOptions(target="pt", turn=None, partials=False, phrase_cache=None))
    assert off.phrases is None
    computed = [t.translation for t in off.run() if t.translation]
    assert len(computed) == len(traces) and computed[0] == traces[0].translation


class _UnplayedSink(TimelineSink):
    """Takes every sample and plays none of them: the backlog only grows (a listener far behind)."""

    def write(self, samples):
        n = super().write(samples)
        self.unplayed = getattr(self, "unplayed", 0) + n
        return n

    def pending(self) -> int:
        return getattr(self, "unplayed", 0)


def test_speech_queued_behind_speech_is_spoken_faster(stages, speech_dir, monkeypatch):
    audio = _twice(read_audio(speech_dir / "en_librispeech_1089-134686-0000.wav")[: 16000 * 4])
    rates: list[float] = []
    original = stages.tts.clauses

    def spy(text, lang, **kw):
        rates.append(kw.get("rate", 1.0))
        return original(text, lang, **kw)

    monkeypatch.setattr(stages.tts, "clauses", spy)
    source = FastFileSource(audio)
    loop = Loop(stages, source, _UnplayedSink(22050, now_s=lambda: source.ring.read_index / 16000), LoopOptions(target="pt", turn=None, partials=False,
                                                                  phrase_cache=None))
    loop.run()
    assert rates[0] == 1.0 and max(rates) > 1.0 and max(rates) <= 1.25, rates


def test_a_barge_in_with_no_word_in_it_makes_the_echo_canceller_wait_again(stages):
    """Loudspeaker mode: an utterance that opened over our speech (paused it) and held no word was our own
    residual echo: the front end then holds openings as while AEC3 first converged (FrontEnd.reconverge; its
    effect: tests/audio/test_frontend.py). One with words (a talker) does not re-arm it."""
    from edge_rt.audio.frontend import FrontEndOptions
    from edge_rt.audio.sinks import RingSink
    from edge_rt.loop.endpoint import Event

    pytest.importorskip("pywebrtc_audio", reason="pip install pywebrtc-audio==0.2.0 (a dependency of edge-rt)")
    for heard, want in (("", ["reconverge"]), ("Wait a moment.", [])):
        source = FastFileSource(np.zeros(16000, np.float32))
        sink = RingSink(16000)
        loop = Loop(stages, source, sink, LoopOptions(target="pt", frontend=FrontEndOptions(), barge_in="pause"))
        calls = []
        loop._frontend.reconverge = lambda: calls.append("reconverge")

        def finalize(tr, speculation, earlier, resay=None, source=None, said=heard):  # what their decode gave
            tr.text = tr.translation = said

        loop._finalize = finalize
        assert sink.write(np.ones(4000, np.float32)) == 4000  # our speech, queued in the sink
        loop._on_event(Event("start", 0))  # someone talks over it: paused
        assert sink.held and not calls
        loop._on_event(Event("end", 8000, "silence"))  # their utterance ends: our speech plays on
        assert not sink.held and calls == want, heard


def _barge_over(stages, audio, first, second, target, begun=2048, **options):
    """Utterance ``first`` ([a, b) in ``audio``'s samples) decoded, translated and playing (``begun`` samples of it
    played), then utterance ``second`` opening over its speech, both through the loop's own events (a talker going
    on after a hesitation). Returns the loop, the two traces, the samples queued for each, and what the sink played
    after the second one ended."""
    from edge_rt.audio.sinks import RingSink
    from edge_rt.loop.endpoint import Event

    # onset None: every sample queued is played, so what was queued and what was played compare sample for sample
    loop = Loop(stages, FastFileSource(np.zeros(16000, np.float32)), sink := RingSink(22050),
                LoopOptions(target=target, turn=None, partials=False, **{"onset": None, **options}))
    loop.history.write(0, audio)
    queued: dict[int, list[np.ndarray]] = {1: [], 2: []}
    add = loop._speech.add

    def spy(tr, samples, is_first):
        queued[tr.utterance].append(samples.copy())
        add(tr, samples, is_first)

    loop._speech.add = spy
    out = np.empty(2048, np.float32)
    loop._on_event(Event("start", first[0]))
    loop._on_event(Event("end", first[1], "silence"))
    if begun:
        sink.consume(out[:begun], 0)  # its translation has begun playing
    loop._on_event(Event("start", second[0]))  # they go on: held
    assert sink.held
    loop._on_event(Event("end", second[1], "silence"))
    assert not sink.held
    played = []
    for _ in range(10_000):
        loop._advance_output()
        if loop._clauses is None and not loop._speech and not sink.pending():
            break
        sink.consume(out, 1)
        played.append(out.copy())
    loop.published.flush()
    traces = sorted(loop.traces, key=lambda t: t.utterance)
    return loop, traces, {k: np.concatenate(v) if v else np.zeros(0, np.float32) for k, v in queued.items()}, \
        np.concatenate(played)


def test_resay_speaks_the_whole_sentence_instead_of_the_rest_of_its_first_part(stages, speech_dir):
    """barge_in "resay": JFK says "... ask not what your country can do for you," and, 0.4 s later, goes on over
    its translation. The rest of that translation is not played; the translation of the two parts together is, and
    the caption of the second shows only its own words. With "pause" (and with "resay" when they go on later than
    resay_within_s, or before any of it was played: older speech may wait ahead of it) the rest plays first, then
    the second part's own translation."""
    from edge_rt.measure.scoring import normalize

    jfk = read_audio(speech_dir / "en_jfk.wav")
    first, second = (3200, 123200), (129600, 169600)  # 0.2-7.7 s and 8.1-10.6 s: a 0.4-s pause between
    words = lambda text: [w for w in (normalize(w, "en") for w in text.split()) if w]  # noqa: E731
    loop, (t1, t2), queued, played = _barge_over(stages, jfk, first, second, "pt", barge_in="resay")
    assert loop.resaid == 1 and t2.resaid and not t1.dropped, (t1.dropped, t2.dropped)
    assert "fellow" in words(t1.text) and "country" in words(t2.text) and "fellow" not in words(t2.text), \
        (t1.text, t2.text)
    np.testing.assert_array_equal(played[:len(queued[2])], queued[2])  # nothing of the first part's rest
    resaid = t2.translation
    for policy, within, begun in (("pause", 2.0, 2048), ("resay", 0.2, 2048), ("resay", 2.0, 0)):
        loop, (u1, u2), queued, played = _barge_over(stages, jfk, first, second, "pt", begun, barge_in=policy,
                                                     resay_within_s=within)
        assert loop.resaid == 0 and not u2.resaid, policy
        rest = len(queued[1]) - begun  # what was not played before they went on
        np.testing.assert_array_equal(played[:rest + len(queued[2])], np.concatenate([queued[1][begun:], queued[2]]))
        # the whole sentence's translation holds (nearly) as many words as the two parts' together
        assert len(resaid.split()) >= 0.8 * (len(u1.translation.split()) + len(u2.translation.split())) \
            > len(u2.translation.split()), (resaid, u1.translation, u2.translation)


@pytest.mark.slow
@pytest.mark.parametrize("onset", [OnsetOptions(), None], ids=["onset", "no-onset"])
def test_translated_speech_is_played_from_where_it_sounds_and_its_turn_timed_there(product_stages, speech_dir, onset):
    """German into English (Piper, whose first clause opens with tens of ms under -60 dBFS): the loop plays only
    ``keep_ms`` of that lead (LoopOptions.onset; all of it with None), and ``first_output`` is when the first
    sample over -60 dBFS is played either way."""
    from edge_rt.audio.sinks import RingSink
    from edge_rt.loop.endpoint import Event

    de = read_audio(speech_dir / "de_fleurs_test_004.wav")  # "Die Höhle befindet sich ... nördlich von Mekka"
    loop = Loop(product_stages, FastFileSource(np.zeros(16000, np.float32)), sink := RingSink(22050),
                LoopOptions(target="en", turn=None, partials=False, onset=onset))
    loop.history.write(0, de)
    loop._on_event(Event("start", 22400))
    loop._on_event(Event("end", 94400, "silence"))  # decoded, translated, its first clause queued
    played = np.empty(22050, np.float32)
    sink.consume(played, 10**9)  # its first second, heard from t = 1 s
    tr = loop._clause_trace  # the utterance being spoken (closed once all its clauses are queued)
    sound = int(np.flatnonzero(np.abs(played) > 1e-3)[0])
    assert sound == round(0.005 * 22050) if onset is not None else sound > 0.015 * 22050, sound
    assert tr.t_ns["first_output"] == 10**9 + sound * 10**9 // 22050, (tr.translation, sound)


@pytest.mark.slow
def test_a_translated_sentence_is_judged_on_its_transcript_s_end_mark(product_stages, speech_dir):
    """German into English (Whisper translates): de_fleurs_test_003's translation ends on a mark Whisper gives 0.26,
    which holds the pause to max_pause_ms; its German transcript's mark is 0.86, which ends it as complete
    (TurnOptions.source_mark_langs). The same words either way, and the German caption is that transcript, not a
    second decode of the same audio."""
    audio = read_audio(speech_dir / "de_fleurs_test_003.wav")
    runs = {}
    for langs in (("de", "es", "fr"), ()):
        source = FastFileSource(audio)
        sink = TimelineSink(22050, now_s=lambda: source.ring.read_index / 16000)
        loop = Loop(product_stages, source, sink, LoopOptions(target="en", turn=TurnOptions(source_mark_langs=langs)))
        calls, caption = [], loop._transcribe_source
        loop._transcribe_source = lambda tr, tail=0, known=None: calls.append(known) or caption(tr, tail, known)
        ends, on_event = [], loop._on_event

        def spy(event, ends=ends, on_event=on_event, source=source):
            if event.kind == "end":
                ends.append(source.ring.read_index - event.sample)
            on_event(event)

        loop._on_event = spy
        runs[langs] = (loop.run(), ends, calls)
    (on, on_ends, on_calls), (off, off_ends, off_calls) = runs.values()
    assert len(on) == len(off) == 1 and on[0].lang == "de", [(t.lang, t.text) for t in on + off]
    assert (on[0].end_reason, on[0].source_mark) == ("complete", True), on[0]
    assert (off[0].end_reason, off[0].source_mark) == ("max_pause", False), off[0]
    # ended at complete_after_ms of pause, not held to max_pause_ms (capture samples read when the end was declared)
    assert on_ends[0] < 600 * 16 < 1000 * 16 < off_ends[0], (on_ends, off_ends)
    assert on[0].text == off[0].text and on[0].translation == off[0].translation and on[0].speculative
    # the German caption: the transcript made at the pause for its mark (not decoded again); without the rule, decoded
    assert on_calls == [on[0].text] and off_calls == [None], (on_calls, off_calls)


@pytest.mark.slow
def test_resay_on_a_translate_route_translates_the_two_parts_audio_together(product_stages, speech_dir):
    """On a translate route (German spoken, English out: Whisper translates) the whole sentence's translation comes
    from one more Whisper pass over both parts' audio; the German caption is still the second part's own."""
    de = read_audio(speech_dir / "de_fleurs_test_004.wav")  # "Die Höhle befindet sich ... | und ist vom Rest ..."
    first, second = (22400, 94400), (97600, 132800)  # 1.4-5.9 s and 6.1-8.3 s
    loop, (t1, t2), queued, played = _barge_over(product_stages, de, first, second, "en", barge_in="resay")
    assert t2.resaid and loop.resaid == 1
    assert "Höhle" in t1.text and "Höhle" not in t2.text and "Rest" in t2.text, (t1.text, t2.text)
    np.testing.assert_array_equal(played[:len(queued[2])], queued[2])
    loop, (u1, u2), _, _ = _barge_over(product_stages, de, first, second, "en", barge_in="pause")
    assert not u2.resaid
    # "... on the tip of the mountain ... and the rest of the world is fully isolated" against "and is the rest of ..."
    assert "mountain" in t2.translation.lower() and "mountain" not in u2.translation.lower(), \
        (t2.translation, u2.translation)
    assert len(t2.translation.split()) > len(u2.translation.split())


def test_words_heard_at_a_pause_are_said_when_the_whole_utterance_gives_none(stages):
    """LoopOptions.keep_heard: the end's decode gave no words, an earlier speculation of the same utterance did:
    those words are translated and spoken, unless the utterance follows speech (it skipped the unsure gate) or the
    option is off."""
    from edge_rt.loop.recognize import Hypothesis
    from edge_rt.loop.trace import UtteranceTrace

    heard = Hypothesis(end=30000, lang="en", text="Wait a moment.", translation="Espere um momento.", asr_ns=0, mt_ns=0)
    nothing = Hypothesis(end=40000, lang="en", text="", translation="", asr_ns=0, mt_ns=0)
    for follows, keep, want in ((False, True, "Wait a moment."), (True, True, ""), (False, False, "")):
        source = FastFileSource(np.zeros(16000, np.float32))
        loop = Loop(stages, source, TimelineSink(22050, now_s=lambda: 0.0), LoopOptions(target="pt", keep_heard=keep))
        if follows:
            loop._context.remember(8000, "en", "Hello there.", 0)
        tr = UtteranceTrace(utterance=1, start_sample=9000, end_sample=40000)
        tr.stamp("speech_end", 0)
        tr.stamp("end_detected", 0)
        loop._finalize(tr, nothing, heard)
        assert tr.text == want, (follows, keep)
        assert (tr.translation == heard.translation) == bool(want) and loop.heard_kept == bool(want)
        assert bool(tr.dropped) != bool(want), tr.dropped


@pytest.mark.slow
def test_a_talker_in_babble_is_said_though_the_room_after_him_tips_the_whole_to_no_speech(default_pack, speech_dir,
                                                                                        speech_manifest):
    """en_fleurs_1938 at 5 dB in the noisy eval's babble: the VAD never closes, Whisper hears the talker at the pause
    after his last word and, given the 2 s of room after it as well, no speech; the foreground retry is dropped by
    the unsure gate. Without keep_heard the clip comes back empty; with it, the words heard at the pause."""
    from edge_rt.measure.noise import NoiseOptions, noisy_mixes
    from edge_rt.measure.noise_eval import run_loop
    from edge_rt.measure.scoring import normalize

    stages = load_stages(default_pack, StageOptions(precision="int8"))
    pool = {m["id"]: read_audio(speech_dir / m["audio"]) for m in speech_manifest}
    mix = next(noisy_mixes({"en_fleurs_1938": pool["en_fleurs_1938"]}, pool,
                           NoiseOptions(kinds=("babble",), snrs_db=(5.0,))))
    said = {}
    for keep in (False, True):
        traces, _ = run_loop(stages, mix.audio, LoopOptions(target="pt", partials=False, keep_heard=keep))
        said[keep] = " ".join(t.text for t in traces if t.text)
    ref = set(normalize(next(m["text"] for m in speech_manifest if m["id"] == "en_fleurs_1938"), "en").split())
    if not said[True]:
        # Known and listed in the README (eighteenth session): since the Whisper decoder's uint8 `dynamic-all`
        # twin (AVX2 builds; 2026-12-05) this mix comes back empty, the speculation at the pause hearing nothing
        # either, so keep_heard has nothing to keep. Its rule stays tested on given hypotheses
        # (test_words_heard_at_a_pause_are_said_when_the_whole_utterance_gives_none).
        pytest.xfail(f"en_fleurs_1938 in 5-dB babble comes back empty on this build ({integer_products()} integer "
                     f"products), with and without keep_heard: a known regression of the uint8 decoder")
    assert len(ref & set(normalize(said[True], "en").split())) >= 4, said[True]
    if said[False]:  # the premise depends on the build's INT8 numerics (integer_products: VNNI or AVX2 only)
        pytest.skip(f"on this build ({integer_products()} integer products) Whisper hears the whole utterance "
                    f"({said[False]!r}): keep_heard has nothing to do here (its case was shown by VNNI builds with int8 "
                    f"decoder weights, before 2026-12-05)")


def test_loudspeaker_mode_starts_with_the_ready_tone_and_never_opens_on_its_echo(stages):
    """Loudspeaker mode plays the ready tone (audio/tone.py) before anything else, so AEC3 learns the echo path
    before anyone talks; a headset plays nothing. With its own playback fed back into the capture (6 dB down,
    40 ms late: bench's echo path) and nobody talking, the tone's echo opens no utterance."""
    from edge_rt.audio.echo_path import EchoPath
    from edge_rt.audio.sinks import PacedFileSink
    from edge_rt.audio.sources import PacedFileSource
    from edge_rt.audio.tone import ready_tone
    from edge_rt.loop.options import loudspeaker_mode
    from edge_rt.measure.bench import run_clip

    pytest.importorskip("pywebrtc_audio", reason="pip install pywebrtc-audio==0.2.0 (a dependency of edge-rt)")
    headset = LoopOptions(target="pt", turn=TurnOptions())
    loud = loudspeaker_mode(headset)
    rate = stages.tts.sample_rate("pt")
    played = {}
    for name, options in (("headset", headset), ("loudspeaker", loud)):
        sink = PacedFileSink(rate)
        Loop(stages, PacedFileSource(np.zeros(8000, np.float32), tail_s=0.5), sink, options).run()
        played[name] = sink.audio()
    assert not played["headset"].any()
    tone = ready_tone(rate, loud.frontend.ready_tone_ms, loud.frontend.ready_tone_db)
    start = int(np.flatnonzero(played["loudspeaker"])[0] - np.flatnonzero(tone)[0])  # the tone starts at 0.0
    np.testing.assert_array_equal(played["loudspeaker"][start : start + len(tone)], tone)
    assert not played["loudspeaker"][start + len(tone) :].any()  # and nothing else
    run = run_clip(stages, np.zeros(SILENCE_S * 16000, np.float32), loud, 0.5, EchoPath())
    assert run.lead > len(tone) * 16000 // rate and run.traces == [], [(t.start_sample, t.text) for t in run.traces]



def test_the_vad_hears_silence_where_the_front_end_hears_our_own_voice(stages, speech_dir):
    """While no utterance is open, a hop the front end calls our echo (FrontEnd.echo, or held while AEC3 converges)
    opens nothing, and the VAD hears zeros in its place: its recurrent state keeps nothing of our voice, as with a
    headset. (The ready tone's echo in the VAD's state moved the end of the next utterance by a frame:
    zh_aishell1_BAC009S0724W0121 ended at max_pause in loudspeaker mode, at the hangover with a headset.)"""
    from edge_rt.audio.frontend import FrontEndOptions
    from edge_rt.audio.sinks import RingSink
    from edge_rt.loop.stages import Stages

    pytest.importorskip("pywebrtc_audio", reason="pip install pywebrtc-audio==0.2.0 (a dependency of edge-rt)")
    heard = []

    def vad(frame):
        heard.append(frame.copy())
        return stages.vad(frame)

    spied = Stages(vad, stages.asr, stages.mt, stages.tts, turn=stages.turn)
    audio = read_audio(speech_dir / "en_jfk.wav")[: 3 * 16000]  # speech from its first second
    ours = 48  # the first ~1.5 s of hops are "our echo"
    loop = Loop(spied, FastFileSource(audio), RingSink(22050), LoopOptions(target="pt", frontend=FrontEndOptions()))
    fe, process = loop._frontend, loop._frontend.process

    def ours_first(first, hop, speaking=False):
        process(first, hop, speaking=speaking)
        fe.echo = first < ours * 512

    fe.process = ours_first
    opened, on_event = [], loop._on_event

    def spy(event):  # where the capture was when an utterance opened
        if event.kind == "start":
            opened.append(loop.history.end)
        on_event(event)

    loop._on_event = spy
    loop.run()
    assert not any(h.any() for h in heard[:ours])
    assert all(h.any() for h in heard[ours : ours + 16])  # then the capture (JFK talking)
    assert opened and min(opened) >= (ours + loop.options.endpoint.start_frames) * 512, opened


SILENCE_S = 2


def test_where_nothing_was_played_loudspeaker_mode_hears_what_a_headset_does(stages, speech_dir):
    """The front end hands out the capture itself, as it comes (or ``lag`` samples late without
    ``passthrough_in_time``), where nothing of ours played (FrontEndOptions.passthrough_after_ms), and the loop's sample
    indices are its output's: the VAD and every decode read the same history. A clip after LEAD - passing_lag samples
    of silence in loudspeaker mode gives the utterances a headset gives after LEAD samples: at the same indices, decoded
    from the same audio, with the same words; the trace's times are when that audio was captured, ``passing_lag``
    samples earlier. Without the passthrough the decodes hear AEC3's and the high-pass's audio (until 2026-12-06 they
    sliced ``lag`` samples on, a word's end they had not framed: that and the high-pass moved Whisper's end mark and
    held clean clips to max_pause)."""
    from edge_rt.audio.frontend import FrontEndOptions
    from edge_rt.audio.sinks import RingSink

    pytest.importorskip("pywebrtc_audio", reason="pip install pywebrtc-audio==0.2.0 (a dependency of edge-rt)")
    clip = read_audio(speech_dir / "en_librispeech_1089-134686-0001.wav")
    lead = 32 * 512
    runs = {}
    for name, fe in (("headset", None), ("loudspeaker", FrontEndOptions()),
                     ("late", FrontEndOptions(passthrough_in_time=False)),
                     ("no passthrough", FrontEndOptions(passthrough_after_ms=None))):
        audio = np.concatenate([np.zeros(lead - (fe.passing_lag if fe else 0), np.float32), clip])
        # a sink nobody drains: its tap (AEC3's far end) records nothing, so nothing is played
        loop = Loop(stages, FastFileSource(audio), RingSink(22050), LoopOptions(target="pt", frontend=fe))
        runs[name] = (loop, list(loop.run()))
    assert FrontEndOptions().passing_lag == 0 and FrontEndOptions(passthrough_in_time=False).passing_lag > 0
    headset, want = runs["headset"]
    assert want
    for name in ("loudspeaker", "late"):
        loud, got = runs[name]
        lag = loud.options.frontend.passing_lag
        assert [(t.start_sample, t.end_sample, t.end_reason, t.text) for t in got] == [
            (t.start_sample, t.end_sample, t.end_reason, t.text) for t in want], name
        for t in want:
            np.testing.assert_array_equal(loud._heard(t.start_sample, t.end_sample),
                                          headset._heard(t.start_sample, t.end_sample))
        for t in got:
            assert t.t_ns["speech_end"] == loud.source.clock.ns(t.end_sample - lag)
            assert t.t_ns["speech_start"] == loud.source.clock.ns(t.start_sample - lag)
        assert loud._frontend.passed_hops == loud._frontend.hops
    other = runs["no passthrough"][0]
    a, b = want[0].start_sample, want[0].end_sample
    assert np.abs(other._heard(a, b) - headset._heard(a, b)).max() > 0.01
