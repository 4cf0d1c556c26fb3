"""The Tts stage: Piper against piper-tts 1.8, bucketed inputs, streaming, formant fallback, intelligibility."""

from __future__ import annotations

import re

import numpy as np
import pytest
import soxr

from edge_rt.errors import UnsupportedLanguageError
from edge_rt.backends.factory import OrtEngines
from edge_rt.stages.tts.voice import Tts, TtsOptions

SENTENCES = [
    "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
    "The quick brown fox jumps over the lazy dog. Is it 42? Yes!",
    "Hi.",
]


@pytest.fixture(scope="module")
def tts(default_pack):
    return Tts.from_pack(default_pack, TtsOptions(deterministic=True), engines=OrtEngines(default_pack))


@pytest.fixture(scope="module")
def reference(default_pack):
    from piper import PiperVoice

    return PiperVoice.load(default_pack.model("tts", "en"), default_pack.asset("tts", "en_config"))


@pytest.fixture(scope="module")
def raw_tts(default_pack):
    """Not peak-normalised: streamed and whole sentences compare sample for sample."""
    return Tts.from_pack(default_pack, TtsOptions(deterministic=True, normalize=False),
                         engines=OrtEngines(default_pack))


def _piper_tts(reference, text: str) -> np.ndarray:
    from piper import SynthesisConfig

    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0)
    return np.concatenate([c.audio_float_array for c in reference.synthesize(text, config)])


def _by_clause(chunks) -> list[tuple[str, np.ndarray]]:
    """A clauses() stream as (text, samples) per clause, checking its clause numbers and last flags."""
    out: list[tuple[str, list]] = []
    for c in chunks:
        if out and not out[-1][2]:  # the previous chunk did not end its clause: this one continues it
            assert c.clause == len(out) - 1 and c.text == ""
            out[-1][1].append(c.samples)
        else:
            assert c.clause == len(out) and c.text
            out.append([c.text, [c.samples], False])
        out[-1][2] = c.last
    assert all(done for _, _, done in out)
    return [(text, np.concatenate(parts)) for text, parts, _ in out]


def test_languages(tts):
    assert tts.languages[0] == "en"
    assert {"pt", "de", "zh", "es", "fr"} <= set(tts.languages)
    assert tts.engine("en") == "piper" and tts.engine("pt") == "espeak" and tts.engine("PT") == "espeak"
    assert tts.sample_rate("en") == 22050 and tts.sample_rate("pt") == 22050


@pytest.mark.parametrize("text", SENTENCES)
def test_waveform_matches_piper_tts(tts, reference, text):
    """Noise off, same scales: bucketed ids give the reference length and (almost) its samples."""
    ours = tts.synthesize(text, "en")
    ref = _piper_tts(reference, text)
    assert ours.engine == "piper" and ours.sample_rate == 22050
    assert ours.samples.dtype == np.float32
    assert ours.samples.shape == ref.shape
    assert np.abs(ours.samples - ref).max() < 1e-4  # measured <= 6e-5
    assert np.corrcoef(ours.samples, ref)[0, 1] > 0.9999


def test_unbucketed_is_the_reference(default_pack, reference):
    exact = Tts.from_pack(default_pack, TtsOptions(deterministic=True, bucketed=False), engines=OrtEngines(default_pack))
    text = SENTENCES[0]
    np.testing.assert_allclose(exact.synthesize(text, "en").samples, _piper_tts(reference, text), atol=1e-5)


def test_buckets(tts):
    voice = tts.piper_voices["en"]
    assert [voice.bucket(n) for n in (1, 32, 33, 300, 512, 513, 1100)] == [32, 32, 64, 512, 512, 1024, 1536]


def test_padding_longer_than_every_bucket(tts):
    long = " ".join(["This sentence keeps going and going without any stop at all"] * 6) + "."
    voice = tts.piper_voices["en"]
    (phonemes,) = tts.phonemize(long, "en")
    assert len(voice.ids(phonemes)) > 512
    audio = tts.synthesize(long, "en")
    assert audio.duration_s > 15


def test_clauses_stream_each_sentence_in_vocoder_windows(tts, raw_tts):
    """One clause per sentence, each in vocoder windows: the first 32 frames (0.37 s) alone, then 128 at a
    time; a clause's samples are the whole sentence's (exactly inside it, ~1e-4 in the last window's padding)."""
    text = "First sentence here. Second one, with a comma? Third!"
    voice = raw_tts.piper_voices["en"]
    assert voice.vocoder is not None, "the default pack splits its English voice (build/export/piper_split.py)"
    chunks = list(raw_tts.clauses(text, "en"))
    clauses = _by_clause(chunks)
    assert [t for t, _ in clauses] == ["First sentence here. ", "Second one, with a comma? ", "Third!"]
    hop = voice.vocoder.hop
    assert len(chunks[0].samples) == 32 * hop and len(chunks) > len(clauses)
    context = voice.vocoder.options.context * hop
    for sentence, samples in clauses:
        whole = raw_tts.synthesize(sentence, "en").samples
        assert samples.shape == whole.shape
        assert np.abs(samples - whole)[:-context].max() < 1e-5
        assert np.abs(samples - whole).max() < 1e-3
    # normalised: scaled by the voice's build-time level, not each sentence's own peak
    level = 1.0 / tts.piper_voices["en"].peak
    normalised = _by_clause(tts.clauses(text, "en"))
    for (_, raw), (_, scaled) in zip(clauses, normalised):
        np.testing.assert_allclose(scaled, np.clip(raw * level, -1, 1), atol=1e-6)


def test_whole_sentences_without_the_vocoder_stream(default_pack):
    plain = Tts.from_pack(default_pack, TtsOptions(deterministic=True, vocoder=None), engines=OrtEngines(default_pack))
    assert plain.piper_voices["en"].vocoder is None
    chunks = list(plain.clauses("First sentence here. Second one, with a comma? Third!", "en"))
    assert [c.text for c in chunks] == ["First sentence here. ", "Second one, with a comma? ", "Third!"]
    assert [c.clause for c in chunks] == [0, 1, 2] and all(c.last for c in chunks)


def test_first_clause_streams_alone_then_sentences(tts):
    text = "Well, the first sentence has a comma, two in fact. Second one, with a comma?"
    clauses = _by_clause(tts.clauses(text, "en"))
    assert [t for t, _ in clauses] == ["Well, ", "the first sentence has a comma, two in fact. ",
                                       "Second one, with a comma?"]
    assert all(len(c) > 0.2 * 22050 for _, c in clauses)
    whole = tts.synthesize(text, "en")  # synthesize() keeps piper's sentence grouping
    assert abs(sum(len(c) for _, c in clauses) / 22050 - whole.duration_s) < 0.5


def test_clauses_are_lazy(tts):
    it = tts.clauses("One. Two. Three.", "en")
    first = next(it)
    assert first.text == "One. " and first.duration_s > 0.2


def test_deterministic_repeats(tts):
    a = tts.synthesize("Same every time.", "en").samples
    b = tts.synthesize("Same every time.", "en").samples
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_text_gives_empty_audio(tts, text):
    for lang in ("en", "pt"):
        audio = tts.synthesize(text, lang)
        assert audio.samples.shape == (0,) and audio.samples.dtype == np.float32
        assert audio.sample_rate == 22050
        assert list(tts.clauses(text, lang)) == []


def test_unknown_language(tts):
    with pytest.raises(UnsupportedLanguageError, match=r"'xx'.*en, .*pt"):
        tts.synthesize("hello", "xx")


def test_portuguese_formant(tts):
    audio = tts.synthesize("Bom dia. Eu gostaria de um café, por favor.", "pt")
    assert audio.engine == "espeak" and audio.sample_rate == 22050
    assert 1.5 < audio.duration_s < 6.0
    rms = float(np.sqrt(np.mean(audio.samples**2)))
    assert 0.05 < rms < 0.6
    assert np.abs(audio.samples).max() <= 1.0
    assert len(list(tts.clauses("Bom dia. Tudo bem?", "pt"))) == 2


@pytest.mark.parametrize("lang, text", [("zh", "你好，世界。"), ("de", "Guten Tag.")])
def test_other_formant_languages(tts, lang, text):
    audio = tts.synthesize(text, lang)
    assert audio.engine == "espeak" and audio.duration_s > 0.5


def test_noise_varies_output(default_pack):
    noisy = Tts.from_pack(default_pack, TtsOptions(), engines=OrtEngines(default_pack))
    a = noisy.synthesize("Noise makes each take different.", "en").samples
    b = noisy.synthesize("Noise makes each take different.", "en").samples
    assert len(a) and len(b)
    assert len(a) != len(b) or not np.array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"precision": "fp16"}, "precision"),
        ({"threads": 0}, "threads"),
        ({"length_scale": 0.0}, "length_scale"),
        ({"noise_scale": -1.0}, "noise_scale"),
        ({"deterministic": True, "noise_w": 0.5}, "deterministic"),
    ],
)
def test_options_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TtsOptions(**kwargs)


def _whisper(pack: str, tmp_path):
    """faster-whisper on a pack's Whisper (CTranslate2): tiny.en for "tiny", base for "default".
    The packs name model, config and tokenizer; CTranslate2 also wants the vocabulary,
    which the tokenizer holds."""
    from faster_whisper import WhisperModel
    from tokenizers import Tokenizer

    from edge_rt.build.packs import PackSpec, acquire

    files = acquire(PackSpec.load(pack))
    for name, key in (("model.bin", "model"), ("config.json", "config"), ("tokenizer.json", "tokenizer")):
        (tmp_path / name).symlink_to(files.path("asr", key))
    vocab = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    if "<|0.00|>" not in vocab:  # tiny.en's tokenizer.json lacks the 1501 timestamp tokens
        tokens += [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    (tmp_path / "vocabulary.txt").write_text("\n".join(tokens), encoding="utf-8")
    return WhisperModel(str(tmp_path), device="cpu", compute_type="int8", cpu_threads=2)


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w ]", "", text.lower()).split()


def _hear(whisper, audio, lang: str) -> str:
    x = soxr.resample(audio.samples, audio.sample_rate, 16_000).astype(np.float32)
    segments, _ = whisper.transcribe(x, language=lang, beam_size=1, vad_filter=False)
    return " ".join(s.text for s in segments)


def test_piper_is_intelligible_to_whisper(tts, tmp_path):
    whisper = _whisper("tiny", tmp_path)
    for text in ["The weather is lovely today.", "Please send the report before Friday afternoon.",
                 "Open the window and let the fresh air in."]:
        heard = _hear(whisper, tts.synthesize(text, "en"), "en")
        assert _words(heard) == _words(text), heard


def test_portuguese_formant_is_roughly_intelligible(tts, tmp_path):
    """espeak-ng's formant voice is robotic; Whisper base still catches the common words
    (measured: "Bom dia, e gostaria do café, por favor.")."""
    whisper = _whisper("default", tmp_path)
    heard = _words(_hear(whisper, tts.synthesize("Bom dia. Eu gostaria de um café, por favor.", "pt"), "pt"))
    assert {"bom", "dia", "gostaria", "café", "favor"} <= set(heard), heard


class _BindOnly:
    """Like the TensorRT runner: no allocating run(); records the shapes and keywords bind() gets."""

    def __init__(self, engine):
        self._engine, self.bound = engine, []

    def run(self, inputs):
        raise AssertionError("PiperVoice called the allocating Engine.run()")

    def bind(self, inputs, outputs, **carry):
        self.bound.append((inputs["input"].shape, {k: v for k, v in outputs.items() if v is not None}, carry))
        return self._engine.bind(inputs, outputs, **carry)


def test_voice_runs_bound_steps_per_bucket_with_the_waveform_data_dependent(default_pack, tts):
    """Inputs bound once per phoneme bucket; the waveform's length is data dependent, so it is the one
    output bound without a buffer (the backend allocates it), and the audio is the same as unbound."""
    import json

    from edge_rt.backends.ort import OrtEngine, SessionOptions
    from edge_rt.stages.tts.piper_ids import PiperVoiceConfig
    from edge_rt.stages.tts.voice import PiperVoice

    config = PiperVoiceConfig.from_dict(json.loads(default_pack.asset("tts", "en_config").read_text(encoding="utf-8")))
    engine = _BindOnly(OrtEngine(default_pack.model("tts", "en"), SessionOptions(intra_op_threads=2)))
    buckets = tuple(default_pack.stage("tts")["phoneme_buckets"])
    voice = PiperVoice(engine, config, (0.0, config.length_scale, 0.0), buckets)
    assert [shape[1] for shape, _, _ in engine.bound] == list(buckets)
    assert all(outs == {} and carry == {"host_outputs": ("output",)} for _, outs, carry in engine.bound)
    reference = tts.piper_voices["en"]
    for text in SENTENCES:
        for phonemes in tts.phonemize(text, "en"):
            ids = voice.ids(phonemes)
            np.testing.assert_array_equal(voice(ids), reference(ids))
    assert len(engine.bound) == len(buckets)  # nothing bound per sentence


def test_faster_rate_is_piper_tts_with_a_shorter_length_scale(tts, reference):
    """rate=1.25 is piper-tts with length_scale 1/1.25: same samples, shorter; the voice's pace
    comes back for the next call (the bound scales are rewritten in place)."""
    from piper import SynthesisConfig

    text = SENTENCES[0]
    first_text, fast = _by_clause(tts.clauses(text, "en", rate=1.25))[0]
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0 / 1.25)
    ref = np.concatenate([c.audio_float_array for c in reference.synthesize(first_text, config)])
    assert fast.shape == ref.shape
    assert np.corrcoef(fast, ref)[0, 1] > 0.9999  # a streamed clause is scaled by the voice's level
    _, normal = _by_clause(tts.clauses(text, "en"))[0]
    # measured 0.90 on this clause: each phoneme's duration is rounded up to whole frames
    assert 0.78 < len(fast) / len(normal) < 0.93
    assert np.array_equal(normal, _by_clause(tts.clauses(text, "en"))[0][1])


def test_faster_formant_rate_is_shorter(tts):
    normal = tts.synthesize("Eu gostaria de um café com leite, por favor.", "pt")
    fast = next(tts.clauses("Eu gostaria de um café com leite, por favor.", "pt", rate=1.25))
    first = next(tts.clauses("Eu gostaria de um café com leite, por favor.", "pt"))
    assert len(fast.samples) < 0.9 * len(first.samples)
    assert normal.duration_s > 0


def test_skip_leaves_out_the_first_clauses_without_synthesizing_them(tts):
    text = "The quick brown fox jumps over the lazy dog. Is it 42? Yes!"
    every = [(c.text, c.clause) for c in tts.clauses(text, "en") if c.text]
    assert [(c.text, c.clause) for c in tts.clauses(text, "en", skip=1) if c.text] == every[1:]
    with pytest.raises(ValueError, match="rate"):
        tts.clauses(text, "en", rate=3.0)


def test_vocoder_windows_are_bound_once_and_stream_without_rebinding(default_pack):
    """Two static window shapes bound at load (CUDA-graph friendly); a sentence of any length binds nothing."""
    from edge_rt.backends.ort import OrtEngine, SessionOptions
    from edge_rt.stages.tts.vocoder import Vocoder, VocoderOptions

    meta = default_pack.stage("tts")["voices"]["en"]
    bound = []

    class Recording:
        def __init__(self, engine):
            self.engine = engine

        def bind(self, inputs, outputs, **kw):
            bound.append((inputs["z"].shape, outputs["output"].shape))
            return self.engine.bind(inputs, outputs, **kw)

        def run(self, inputs):
            return self.engine.run(inputs)

    engine = OrtEngine(default_pack.model("tts", "en/vocoder"), SessionOptions(intra_op_threads=2))
    options = VocoderOptions(first_frames=8, frames=20, context=4)
    vocoder = Vocoder(Recording(engine), meta["stream_channels"], meta["stream_hop"], options)
    hop = meta["stream_hop"]
    assert bound == [((1, 192, 12), (1, 1, 1, 12 * hop)), ((1, 192, 28), (1, 1, 1, 28 * hop))]
    rng = np.random.default_rng(0)
    for frames in (3, 8, 9, 57):
        z = rng.normal(size=(1, 192, frames)).astype(np.float32)
        pieces = list(vocoder.stream(z))
        assert [len(p) for p, _ in pieces] == [min(8, frames) * hop] + [
            min(20, frames - s) * hop for s in range(8, frames, 20)]
        assert [last for _, last in pieces] == [False] * (len(pieces) - 1) + [True]
        whole = vocoder.whole(z)
        assert np.concatenate([p for p, _ in pieces]).shape == whole.shape
    assert len(bound) == 2


def test_first_clauses_stops_after_the_last_chunk_of_the_nth_clause(tts):
    from edge_rt.stages.tts.voice import first_clauses

    text = "The first sentence is long enough to stream in several windows. Second one. Third!"
    seen = []

    def spy():
        for c in tts.clauses(text, "en"):
            seen.append(c.clause)
            yield c

    kept = list(first_clauses(spy(), 1))
    assert {c.clause for c in kept} == {0} and kept[-1].last and len(kept) > 1
    assert seen == [0] * len(kept)  # the second clause was never synthesized
    assert [c.clause for c in first_clauses(tts.clauses(text, "en"), 2)][-1] == 1
